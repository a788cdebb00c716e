"""Atomic file output and run folders: a failed run never leaves a half-written file."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path; on success it becomes `path`. A regular file (or a new one) is replaced
    atomically by a rename; a symlink is followed to its target (the link itself stays); a
    character device or a FIFO is written into, never replaced (`--markdown /dev/null` must not
    turn the machine's /dev/null into a file); anything else (a folder, a block device, a socket,
    a dangling link) is refused before any work."""
    target = output_target(Path(path))
    if target.stream:
        yield from _streamed(target.path)
        return
    path = target.path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:  # named by the path the user gave, not our temp file's
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; give the file normal permissions
        os.replace(tmp_path, path)
    except OSError as exc:
        if exc.filename in (tmp, str(tmp_path)) or exc.filename2 in (tmp, str(tmp_path)):
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    finally:
        tmp_path.unlink(missing_ok=True)


class OutputTarget:
    """Where an output path really leads: `path` (a symlink resolved) and whether to stream into it."""

    def __init__(self, path: Path, stream: bool):
        self.path, self.stream = path, stream


def output_target(path: Path) -> OutputTarget:
    """Classify an output path before anything is written; refuse what cannot be written."""
    from pddbench.core.errors import UserError

    if path.is_symlink():
        resolved = Path(os.path.realpath(path))
        if not resolved.exists() and not resolved.parent.is_dir():
            raise UserError(f"{path} is a symbolic link to {resolved}, whose folder does not exist; "
                            "give a file path or fix the link")
        path = resolved
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return OutputTarget(path, False)
    except OSError as exc:
        raise UserError(f"{path}: cannot be written ({exc.strerror or exc})") from None
    if stat.S_ISREG(mode):
        return OutputTarget(path, False)
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return OutputTarget(path, True)
    kind = "a folder" if stat.S_ISDIR(mode) else "a block device" if stat.S_ISBLK(mode) else \
        "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
    raise UserError(f"{path} is {kind}; give a file path (it would never be replaced)")


def _streamed(dest: Path) -> Iterator[Path]:
    """Write the output to a private temp file, then copy it into the device or FIFO. A FIFO
    without a reader is refused rather than waited on (nothing a user types may hang)."""
    from pddbench.core.errors import UserError

    tmp_dir = tempfile.mkdtemp(prefix="pddbench-out-")
    tmp_path = Path(tmp_dir) / dest.name
    try:
        yield tmp_path
        flags = os.O_WRONLY | (os.O_NONBLOCK if stat.S_ISFIFO(os.stat(dest).st_mode) else 0)
        try:
            fd = os.open(dest, flags)
        except OSError as exc:
            why = "no process is reading it" if exc.errno == errno.ENXIO else (exc.strerror or str(exc))
            raise UserError(f"{dest}: cannot write into it ({why})") from None
        try:
            os.set_blocking(fd, True)
            with open(tmp_path, "rb") as src:
                while chunk := src.read(1 << 16):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view):]
        except OSError as exc:
            raise UserError(f"{dest}: writing into it failed ({exc.strerror or exc})") from None
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Standard JSON only: a non-finite number (no value, an unbounded range) is written as null,
    since NaN and Infinity are not JSON (our own strict reader, jq and browsers refuse them)."""
    write_text(path, json.dumps(_finite(obj), indent=2, sort_keys=True, default=_json_default, allow_nan=False) + "\n")


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return _finite(obj.tolist())
    return obj


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


CLAIM = ".claim"  # inside a run folder while a run owns it (holds the owner's pid)


def new_run_dir(root: str | os.PathLike, name: str, run_id: str | None = None) -> Path:
    """Create and claim results/<name>/<run-id>/; never reuse an existing folder."""
    check_out_place(Path(root), "--results")
    base = Path(root) / name
    stamp = run_id or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    candidate, n = base / stamp, 1
    while True:
        try:
            candidate.mkdir(parents=True, exist_ok=False)
            _write_claim(candidate)
            return candidate
        except FileExistsError:
            n += 1
            candidate = base / f"{stamp}-{n}"
        except OSError as exc:
            raise _place_error(candidate, "--results", exc) from None


def check_out_place(out: Path, option: str = "--out", folder: bool = True) -> None:
    """Refuse, before any work, an output place that cannot be used: a file where a folder is
    needed (or a folder where a file is), a path under a file, an unwritable place, or a run
    folder that is not empty."""
    from pddbench.core.errors import UserError

    if folder and out.exists() and not out.is_dir():
        raise UserError(f"{option} {out} is a file, not a folder")
    if not folder and out.is_dir():
        raise UserError(f"{option} {out} is a folder, not a file")
    if not folder:
        try:
            out = output_target(out).path  # a device, FIFO or link target: written into, never replaced
        except UserError as exc:
            raise UserError(f"{option} {exc}") from None
    parent = _nearest_existing(out if folder else out.parent)
    if not parent.is_dir():
        raise UserError(f"{option} {out} lies under {parent}, which is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{option} {out}: {parent} is not writable")
    if folder or not _streams(out):
        _probe_writable(parent, out, option)
    if folder and option == "--out" and out.is_dir() and _entries(out):
        what = "an existing run folder" if _is_run_folder(out) else "not empty"
        raise UserError(f"{option} {out} is {what}; runs never overwrite each other, choose a new folder")


def _streams(path: Path) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def _probe_writable(parent: Path, out: Path, option: str) -> None:
    """A file made and removed in `parent`: os.access answers yes to root on a read-only or
    pseudo file system (/proc, /sys, a read-only mount), where the output would fail after the
    work (and after, e.g., the gate's history was appended to)."""
    from pddbench.core.errors import UserError

    try:
        fd, probe = tempfile.mkstemp(prefix=".pddbench-probe-", dir=parent)
    except OSError as exc:
        raise UserError(f"{option} {out}: nothing can be written in {parent} ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)


def _nearest_existing(path: Path) -> Path:
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _entries(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return ["?"]


def _is_run_folder(folder: Path) -> bool:
    return any((folder / f).exists() for f in ("summary.json", "records.parquet", CLAIM, "capacity.json",
                                               "comparison.json", "stats.json", "fidelity.json"))


def _place_error(path: Path, option: str, exc: OSError):
    from pddbench.core.errors import UserError

    return UserError(f"{option} {path}: cannot create it ({exc.strerror or exc})")


def _write_claim(folder: Path) -> None:
    """Atomic: O_EXCL creation succeeds for exactly one of two runs naming the same folder."""
    fd = os.open(folder / CLAIM, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{os.getpid()}\n")


def claim_out_folder(out: Path) -> Path:
    """A user-chosen run folder: it must be new or empty (runs never overwrite each other). Of two
    runs claiming it at once, exactly one gets it."""
    from pddbench.core.errors import UserError

    if (out / FAILED).is_file() and not (out / CLAIM).exists():
        discard_folder(out, made_here=False)  # a failed run's leftovers give way to the re-run
    check_out_place(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        _write_claim(out)
    except FileExistsError:
        raise UserError(f"--out {out} is being used by another run (it holds {CLAIM}); choose a new folder") from None
    except OSError as exc:
        raise _place_error(out, "--out", exc) from None
    if set(_entries(out)) != {CLAIM}:  # something arrived between the check and the claim
        (out / CLAIM).unlink(missing_ok=True)
        raise UserError(f"--out {out} is not empty; runs never overwrite each other, choose a new folder")
    return out


def release_claim(folder: Path) -> None:
    (folder / CLAIM).unlink(missing_ok=True)


def discard_folder(folder: Path, made_here: bool) -> None:
    """Remove what a failed run wrote (and the folder when this run made it)."""
    import shutil

    if not folder.is_dir():
        return
    if made_here:
        shutil.rmtree(folder, ignore_errors=True)
        return
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


FAILED = "FAILED"  # a run that failed after writing what it could keep (live logs) says so here


class RunFolder:
    """A claimed run folder. Call interrupted() once every file written says it is interrupted."""

    def __init__(self, path: Path, made_here: bool):
        self.path, self.made_here = path, made_here
        self.kept: str | None = None
        self.keep_on_error = False  # live runs keep their logs, marked FAILED

    def interrupted(self, kept: str) -> None:
        self.kept = kept


# Folders this process completed: a Ctrl-C that lands after one is complete (and before the
# process ends) must say the folder is kept, not that nothing was written.
COMPLETED_FOLDERS: list[Path] = []


@contextmanager
def run_folder(out: Path | None, results: Path, name: str) -> Iterator[RunFolder]:
    """Claim `out` (new or empty) or a new RESULTS/<name>/<run-id>/ for one run. Ctrl-C leaves
    nothing, or, after interrupted(), a folder whose files all say so; any other error removes
    what was written (a live run keeps its logs beside a FAILED note), so a corrected re-run with
    the same --out works. Raises Interrupted (a KeyboardInterrupt) with a line saying what was kept."""
    from pddbench.core.errors import Interrupted, is_interrupt

    made = out is None or not out.exists()
    path = new_run_dir(results, name) if out is None else claim_out_folder(out)
    folder = RunFolder(path, made)
    try:
        yield folder
    except BaseException as exc:
        if not is_interrupt(exc):
            _failed(folder, exc)
            raise
        if folder.kept is None:
            discard_folder(path, made)
            raise Interrupted(f"interrupted; nothing kept ({path} removed)") from None
        release_claim(path)
        raise Interrupted(f"interrupted; kept {folder.kept} in {path} (every file says interrupted)") from None
    release_claim(path)
    COMPLETED_FOLDERS.append(path)


def _failed(folder: RunFolder, exc: BaseException) -> None:
    if not folder.keep_on_error:
        discard_folder(folder.path, folder.made_here)
        return
    write_text(folder.path / FAILED, f"{type(exc).__name__}: {exc}\n")
    release_claim(folder.path)


def interrupted_title(title: str, interrupted: bool) -> str:
    """Figure titles of an interrupted run say so."""
    return f"{title} (INTERRUPTED: partial)" if interrupted else title


def check_out_options(out: Path | None, results_root: Path) -> None:
    """Refuse an unusable --out / --results before any work."""
    if out is not None:
        check_out_place(out)
    else:
        check_out_place(results_root, "--results")
