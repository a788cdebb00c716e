"""Executors run tasks (JSON text + file bytes, see payload.py) and yield (index, result JSON) as
they finish: in this process (-j 1), in a local process pool (-j N) or on Ray (--ray [ADDRESS]).
Results do not depend on which: every backend calls the same tasks.execute."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
import signal
import socket
import tempfile
import threading
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from pddbench.core.errors import UserError
from pddbench.sweep.payload import Payload
from pddbench.sweep.tasks import execute


def _failed(error: str) -> str:
    return json.dumps({"status": "failed", "error": error, "wall_s": None}, sort_keys=True)


class Executor:
    name = "inline"
    workers = 1

    def run(self, payloads: Sequence[Payload]) -> Iterator[tuple[int, str]]:
        raise NotImplementedError

    def close(self, cancel: bool = False) -> None:
        pass

    def describe(self) -> dict:
        return {"executor": self.name, "workers": self.workers}

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, exc_type, *_) -> None:
        self.close(cancel=exc_type is not None)


class InlineExecutor(Executor):
    """In this process, one task at a time (Ctrl-C reaches the simulation directly)."""

    def run(self, payloads):
        for i, p in enumerate(payloads):
            yield i, execute(p.task, *p.blobs)


def _quiet_worker() -> None:
    # Ctrl-C is the parent's to handle: it keeps what finished and ends the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class PoolExecutor(Executor):
    """A local process pool (forkserver where available, else spawn: no fork of a threaded
    parent). Workers start on first use and are reused across run() calls."""
    name = "process-pool"

    def __init__(self, workers: int):
        self.workers = workers
        method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        ctx = mp.get_context(method)
        if method == "forkserver":
            ctx.set_forkserver_preload(["pddbench.sweep.tasks", "pddbench.measure.runner"])
        self._pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_quiet_worker)

    def run(self, payloads):
        futures = {self._pool.submit(execute, p.task, *p.blobs): i for i, p in enumerate(payloads)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in sorted(done, key=futures.get):
                try:
                    yield futures[f], f.result()
                except Exception as exc:  # a worker died (BrokenProcessPool, out of memory): record it
                    yield futures[f], _failed(f"{type(exc).__name__}: {exc}")

    def close(self, cancel: bool = False) -> None:
        procs = list((getattr(self._pool, "_processes", None) or {}).values())
        self._pool.shutdown(wait=not cancel, cancel_futures=True)
        if cancel:  # do not wait for running tasks after Ctrl-C: end them
            for p in procs:
                if p.is_alive():
                    p.terminate()
            for p in procs:
                p.join(5)


class RayExecutor(Executor):
    """Ray: a local runtime (address None, `workers` CPUs) or an existing cluster. Each distinct
    data file is put in the object store once; tasks get its reference, a JSON string and nothing
    else of ours.

    A cluster address is checked before ray.init, which on a port where no head answers retries
    for minutes and prints its retries on the terminal: a malformed address is refused as typed,
    and the head's port must accept a TCP connection and answer in HTTP/2 (gRPC) within
    RAY_CONNECT_TIMEOUT_S. What Ray prints while connecting goes to `log_path` (a temp file when
    None), named in the error when the connection fails."""
    name = "ray"

    def __init__(self, address: str | None, workers: int | None, log_path: Path | None = None):
        address, given = ray_address(address)
        if address:
            address = check_ray_head(address, given)
        if address and address.rsplit(":", 1)[0].removeprefix("ray://") in ("127.0.0.1", "localhost"):
            # A loopback head (ray start --node-ip-address=127.0.0.1): Ray rewrites 127.0.0.1 to
            # this machine's address unless told it is not clustering across machines.
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        if address and "RAY_AUTH_MODE" not in os.environ and _ray_token_available():
            os.environ["RAY_AUTH_MODE"] = "token"  # `ray start` clusters require the token by default
        try:
            import ray
        except ImportError:
            raise UserError("--ray needs the ray package: pip install 'pddbench[cluster]' "
                            "(or pip install 'ray[default]')") from None
        self._ray = ray
        self.log_path = log_path or _ray_log_file()
        kwargs = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            with _output_to(self.log_path):
                if address:
                    ray.init(address=address, **kwargs)
                else:
                    ray.init(num_cpus=workers or os.cpu_count(), **kwargs)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log = f"; Ray's output: {self.log_path}" if _nonempty(self.log_path) else ""
            raise UserError(f"{given or '--ray (local runtime)'}: {first} (a `ray start` cluster needs its token: "
                            f"RAY_AUTH_TOKEN or ~/.ray/auth_token, with RAY_AUTH_MODE=token{log})") from None
        self.address = address or "local"
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._remote = ray.remote(num_cpus=1, max_retries=1)(execute)
        self._refs: dict[bytes, object] = {}  # blob -> object ref, so each file is sent once
        self._pending: list = []

    def describe(self) -> dict:
        return {"executor": self.name, "workers": self.workers, "address": self.address,
                "ray": self._ray.__version__}

    def _ref(self, blob: bytes):
        if blob not in self._refs:
            self._refs[blob] = self._ray.put(blob)
        return self._refs[blob]

    def run(self, payloads):
        ray = self._ray
        index = {}
        for i, p in enumerate(payloads):
            index[self._remote.remote(p.task, *[self._ref(b) for b in p.blobs])] = i
        self._pending = list(index)
        while self._pending:
            done, self._pending = ray.wait(self._pending, num_returns=1)
            for ref in done:
                try:
                    yield index[ref], ray.get(ref)
                except Exception as exc:  # the worker or node died: record it with the point
                    yield index[ref], _failed(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")

    def close(self, cancel: bool = False) -> None:
        if cancel:
            for ref in self._pending:
                try:
                    self._ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - already finished or gone
                    pass
        self._ray.shutdown()
        try:
            if self.log_path.name.startswith("pddbench-ray-") and self.log_path.stat().st_size == 0:
                self.log_path.unlink()  # a temp log Ray wrote nothing into
        except OSError:
            pass


RAY_CONNECT_TIMEOUT_S = 5.0  # a head on a reachable network answers in milliseconds
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # + empty SETTINGS
_ADDRESS = re.compile(r"^(?P<scheme>ray://)?(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9._-]+)):(?P<port>[0-9]{1,5})$")


def ray_address(address: str | None) -> tuple[str | None, str]:
    """The cluster address --ray names (None: a local runtime) and how the user gave it, for
    messages: the command's address, else $RAY_ADDRESS (Ray's own way to name a cluster)."""
    given = f"--ray {address}" if address else ""
    if not address and os.environ.get("RAY_ADDRESS"):
        address, given = os.environ["RAY_ADDRESS"], f"RAY_ADDRESS={os.environ['RAY_ADDRESS']}"
    if (address or "").strip() in ("", "local"):  # "local": Ray's word for a runtime of its own
        return None, given
    return address, given


def check_ray_option(ray: str | None) -> None:
    """For a command that takes --ray: refuse an unreachable or malformed cluster address before
    the command makes any folder (RayExecutor checks again when it connects)."""
    if ray is None:
        return
    address, given = ray_address(None if ray in ("", "local") else ray)
    if address:
        check_ray_head(address, given)


def parse_ray_address(address: str, given: str) -> tuple[str, int]:
    """(host, port) of HOST:PORT, [IPv6]:PORT or ray://HOST:PORT; a UserError for anything else."""
    m = _ADDRESS.match(address.strip())
    port = int(m["port"]) if m else 0
    if m is None or not 1 <= port <= 65535:
        raise UserError(f"{given}: not a Ray address; give the head's HOST:PORT (its GCS port, 6379 unless `ray start "
                        "--port` said otherwise), ray://HOST:PORT for Ray Client, or no address for a local runtime")
    return m["v6"] or m["host"], port


def check_ray_head(address: str, given: str, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> str:
    """The address to give ray.init, once a head is seen to answer there; else a one-line
    UserError within about `timeout_s` (name lookup included). 'auto' is Ray's latest local
    cluster (`ray start`), resolved to its address first."""
    if address.strip() == "auto":
        address = _latest_local_cluster(given)
        given = f"{given} ({address})"
    host, port = parse_ray_address(address, given)
    result: dict = {}

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s) as conn:
                if os.environ.get("RAY_USE_TLS", "0") in ("0", ""):  # a TLS head would not answer plain HTTP/2
                    conn.sendall(_HTTP2_PREFACE)
                    conn.settimeout(timeout_s)
                    head = conn.recv(9)
                    result["grpc"] = len(head) >= 4 and head[3] == 4  # the server's SETTINGS frame
                else:
                    result["grpc"] = True
        except OSError as exc:
            result["error"] = exc

    # in a thread: create_connection's timeout does not bound the name lookup
    probe = threading.Thread(target=attempt, name="ray-head-probe", daemon=True)
    probe.start()
    probe.join(timeout_s + 0.5)
    what = f"{given}: no Ray head answers at {host}:{port}"
    if probe.is_alive():
        raise UserError(f"{what} (no answer within {timeout_s:g} s); check the address and that `ray start --head` "
                        "runs there")
    err = result.get("error")
    if isinstance(err, socket.gaierror):
        raise UserError(f"{given}: cannot resolve host {host} ({err.strerror or err})")
    if err is not None:
        why = "timed out" if isinstance(err, TimeoutError) else (err.strerror or type(err).__name__)
        raise UserError(f"{what} ({why}); check the address and that `ray start --head` runs there")
    if not result.get("grpc"):
        raise UserError(f"{what}: something listens there but does not speak gRPC (is it the head's GCS port?)")
    return address.strip()


def _latest_local_cluster(given: str) -> str:
    try:
        from ray._private.services import canonicalize_bootstrap_address

        found = canonicalize_bootstrap_address("auto")
    except ImportError:
        raise UserError(f"{given}: 'auto' needs the ray package: pip install 'pddbench[cluster]'") from None
    except Exception:  # noqa: BLE001 - Ray's lookup raises several kinds when none is found
        found = None
    if not found:
        raise UserError(f"{given}: no Ray cluster started on this machine (`ray start --head`) was found")
    return str(found)


def _nonempty(path: Path) -> bool:
    try:
        if path.stat().st_size:
            return True
        path.unlink()
    except OSError:
        pass
    return False


def _ray_log_file() -> Path:
    fd, name = tempfile.mkstemp(prefix="pddbench-ray-", suffix=".log")
    os.close(fd)
    return Path(name)


@contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """Standard error, Python's and the process's (Ray's C++ core prints there), into `path`."""
    import contextlib
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "a", encoding="utf-8") as log:
        try:
            os.dup2(log.fileno(), 2)
            with contextlib.redirect_stderr(log):
                yield
        finally:
            log.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _ray_token_available() -> bool:
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    return bool(os.environ.get("RAY_AUTH_TOKEN")) or os.path.isfile(path)


def results_in_order(executor: Executor, payloads: Sequence[Payload], field: str, what) -> list:
    """Each task's `field`, in the order of `payloads` whatever order they finish in; the first
    failed task raises, named by `what(i)`."""
    out: list = [None] * len(payloads)
    for i, text in executor.run(payloads):
        res = json.loads(text)
        if res["status"] != "ok":
            raise RuntimeError(f"{what(i)} failed: {res['error']}")
        out[i] = res[field]
    return out


def default_jobs() -> int:
    return os.cpu_count() or 1


def make_executor(jobs: int | None, ray: str | None = None, tasks: int | None = None) -> Executor:
    """-j N (0 or None: all cores) -> inline for 1, a process pool otherwise (no more workers
    than tasks); `ray` ("" or "local" for a local runtime, else a cluster address) -> Ray."""
    jobs = jobs or default_jobs()
    if ray is not None:
        return RayExecutor(None if ray in ("", "local") else ray, jobs if ray in ("", "local") else None)
    if tasks is not None:
        jobs = max(1, min(jobs, tasks))
    return InlineExecutor() if jobs == 1 else PoolExecutor(jobs)
