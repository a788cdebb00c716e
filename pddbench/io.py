"""Atomic file output and run folders: a failed run never leaves a half-written file."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside `path`; rename it over `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; give the file normal permissions
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    # numpy scalars and arrays end up in summaries; make them plain JSON.
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def save_figure(fig: Any, path: str | os.PathLike) -> None:
    """Save a matplotlib figure atomically (format from the suffix) and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip("."), dpi=120, bbox_inches="tight")
    plt.close(fig)


def new_run_dir(root: str | os.PathLike, name: str, run_id: str | None = None) -> Path:
    """Create results/<name>/<run-id>/; never reuse an existing folder."""
    base = Path(root) / name
    stamp = run_id or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    candidate, n = base / stamp, 1
    while True:
        try:
            candidate.mkdir(parents=True, exist_ok=False)
            return candidate
        except FileExistsError:
            n += 1
            candidate = base / f"{stamp}-{n}"


def claim_out_folder(out: Path) -> Path:
    """A user-chosen run folder: it must be new or empty (runs never overwrite each other)."""
    from pddbench.errors import UserError

    if out.exists() and any(out.iterdir()):
        raise UserError(f"--out {out} exists and is not empty; runs never overwrite each other, choose a new folder")
    out.mkdir(parents=True, exist_ok=True)
    return out
