"""What a task carries to a worker: plain JSON text and the bytes of the data files its scenario
names. Nothing of ours is pickled and no worker needs a shared disk: link profiles are inlined and
each data file (trace, calibration CSV) travels by content, named `sha256:<digest>` in the
scenario, so a point's identity does not depend on where the file lies."""

from __future__ import annotations

import atexit
import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pddbench.core.errors import InputError, UserError
from pddbench.schema.scenario import Scenario

FILE_FIELDS = (("workload", "trace", ".jsonl"), ("latency", "calibration_csv", ".csv"))
_PREFIX = "sha256:"


@dataclass(frozen=True)
class Payload:
    task: str                 # JSON; task["files"] lists the digests of `blobs`, in order
    blobs: tuple[bytes, ...]


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ship_scenario(sc: Scenario, cache: dict | None = None) -> tuple[dict, dict[str, bytes]]:
    """The scenario as JSON data, self-contained: profiles inlined, data files by digest; and the
    files' bytes by digest (`cache` keeps files read for earlier points). Raises InputError naming
    the field for an unknown profile or an unreadable file."""
    cache = {} if cache is None else cache
    data = sc.model_dump(mode="json")
    for name in ("wan", "rdma"):
        ref = getattr(sc.network, name)
        key = ("profile", ref) if isinstance(ref, str) else None  # a named profile file: read once per cache
        if key is None or key not in cache:
            try:
                dumped = getattr(sc.network, f"{name}_profile")().model_dump(mode="json")
            except UserError as exc:
                raise InputError("scenario", str(exc), field=f"network.{name}") from None
            if key is None:
                data["network"][name] = dumped
                continue
            cache[key] = json.dumps(dumped)
        data["network"][name] = json.loads(cache[key])
    blobs: dict[str, bytes] = {}
    for section, key, _ in FILE_FIELDS:
        path = data[section].get(key)
        if path is None or str(path).startswith(_PREFIX):
            continue
        if section == "workload" and sc.workload.resolved_source() != "trace":
            data[section][key] = None  # not read by this scenario: not part of what it is
            continue
        if path not in cache:
            try:
                content = Path(path).read_bytes()
            except OSError as exc:
                raise InputError(str(path), f"cannot read it ({exc.strerror or exc})", field=f"{section}.{key}") from None
            cache[path] = (digest(content), content)
        d, content = cache[path]
        data[section][key] = _PREFIX + d
        blobs[d] = content
    return data, blobs


def make_payload(task: dict, blobs: dict[str, bytes]) -> Payload:
    digests = sorted(blobs)
    return Payload(json.dumps({**task, "files": digests}, sort_keys=True), tuple(blobs[d] for d in digests))


_cache_dir: Path | None = None


def _file_dir() -> Path:
    """This process's folder for received files (one per worker process, removed at exit)."""
    global _cache_dir
    if _cache_dir is None:
        _cache_dir = Path(tempfile.mkdtemp(prefix="pddbench-task-"))
        atexit.register(shutil.rmtree, _cache_dir, True)
    return _cache_dir


def receive_scenario(data: dict, files: dict[str, bytes]) -> Scenario:
    """Worker side: write the received files once and point the scenario at them."""
    data = json.loads(json.dumps(data))  # a private copy
    for section, key, suffix in FILE_FIELDS:
        ref = data[section].get(key)
        if isinstance(ref, str) and ref.startswith(_PREFIX):
            d = ref[len(_PREFIX):]
            path = _file_dir() / f"{d}{suffix}"
            if not path.exists():
                tmp = path.with_suffix(".part")
                tmp.write_bytes(files[d])
                tmp.replace(path)
            data[section][key] = str(path)
    return Scenario.model_validate(data)
