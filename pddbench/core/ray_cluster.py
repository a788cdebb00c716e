"""Connecting to Ray, for every command that takes --ray (sweeps, capacity searches, the
reproduction, sharded replay): the address named (the command's, else $RAY_ADDRESS; none: a local
runtime) is checked before ray.init, which on a port where no head answers retries for minutes and
prints its retries on the terminal. A malformed address is refused as typed, and the head's port
must accept a TCP connection and answer in HTTP/2 (gRPC) within RAY_CONNECT_TIMEOUT_S. What Ray
prints while connecting goes to a log file, named in the error when the connection fails."""

from __future__ import annotations

import os
import re
import socket
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from pddbench.core.errors import UserError


def connect_ray(address: str | None, cpus: int | None, log_path: Path | None = None):
    """(the ray module, the address connected to or 'local', Ray's log file): a local runtime of
    `cpus` CPUs (address None) or an existing cluster."""
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
    log_path = log_path or _ray_log_file()
    kwargs = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        with _output_to(log_path):
            if address:
                ray.init(address=address, **kwargs)
            else:
                # address="local": a new runtime even where a stale cluster file (a stopped `ray start`)
                # would make ray.init join that cluster instead
                ray.init(address="local", num_cpus=cpus or os.cpu_count(), **kwargs)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log = f"; Ray's output: {log_path}" if _nonempty(log_path) else ""
        raise UserError(f"{given or '--ray (local runtime)'}: {first} (a `ray start` cluster needs its token: "
                        f"RAY_AUTH_TOKEN or ~/.ray/auth_token, with RAY_AUTH_MODE=token{log})") from None
    return ray, address or "local", log_path


def disconnect_ray(ray, log_path: Path) -> None:
    ray.shutdown()
    try:
        if log_path.name.startswith("pddbench-ray-") and log_path.stat().st_size == 0:
            log_path.unlink()  # a temp log Ray wrote nothing into
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
    the command makes any folder (connect_ray checks again when it connects)."""
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
