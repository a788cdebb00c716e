"""`pddbench serve pdd-router | pd-proxy SCENARIO` (issue 28.5): the PDD router or the PD proxy as
a standalone service in front of engines that already run, so a team can put PDD before its own
fleet and replay traces through it with `pddbench replay`.

The scenario gives the policy, SLA, WAN profile and KV geometry (as in a live run); the engines
come from `--inventory FILE` (role -> {url, kv_side_channel}, the same fields as live.attach) or
the scenario's live.attach. Before listening, every engine is checked as attach mode checks it
(health, served model, KV side channel). The service binds to loopback or a pddbench namespace
address only, adds /metrics, /health/engines and JSON log lines (service.py), and shuts down
cleanly on Ctrl-C or SIGTERM (its client session closed, handoffs still draining cancelled)."""

from __future__ import annotations

import ipaddress
import json
import logging
import sys
from pathlib import Path

from pydantic import ValidationError

from netem.errors import InputError
from pddbench.core.errors import UserError
from pddbench.core.loading import load_yaml, read_text

FRONT_KINDS = {"pdd-router": ("pdd",), "pd-proxy": ("same_dc_pd", "cross_dc_pd")}


def load_inventory(path: Path) -> dict:
    """role -> AttachedEngine from a YAML file: `P: {url: ..., kv_side_channel: HOST:PORT}` or
    `P: http://...` (no side channel); refused naming the file and field."""
    from pddbench.schema.runtime_config import AttachedEngine

    data = load_yaml(read_text(path, "engine inventory"), str(path))
    if not isinstance(data, dict) or not data:
        raise InputError(str(path), "expected a mapping of role to engine, e.g. P: {url: 'http://10.0.0.5:8000', "
                         "kv_side_channel: '10.0.0.5:5600'}")
    out = {}
    for role, value in data.items():
        try:
            out[str(role)] = AttachedEngine.model_validate({"url": value} if isinstance(value, str) else value)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in (role, *err["loc"]))
            raise InputError(str(path), err["msg"], field=where) from None
    return out


def check_bind(host: str) -> None:
    """Loopback or a pddbench namespace address only (the project's servers never listen wider)."""
    from netem.topology import DC_A, DC_B

    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise UserError(f"--host {host}: give an IP address (127.0.0.1, or {DC_A.address} inside {DC_A.netns})") from None
    if not (ip.is_loopback or host in (DC_A.address, DC_B.address)):
        raise UserError(f"--host {host}: pddbench's services listen on loopback or its own namespaces' addresses "
                        f"({DC_A.address}, {DC_B.address}) only; put your own reverse proxy or load balancer in "
                        "front to reach it from other hosts")


def prepare(front: str, scenario, overrides: list[str], inventory: Path | None):
    """The checked scenario (live.attach set to the engines served) and the engines' specs."""
    from pddbench.live.deploy import attached, check_attached_engines, engine_specs
    from pddbench.live.placement import PLACEMENTS
    from pddbench.schema.scenario import load_scenario

    sc = load_scenario(scenario, overrides)
    kind = sc.deployment.kind if sc.deployment is not None else None
    if kind not in FRONT_KINDS[front]:
        raise UserError(f"{scenario}: serve {front} fronts a {' or '.join(FRONT_KINDS[front])} deployment; the scenario's "
                        f"deployment.kind is {kind}")
    engines = load_inventory(inventory) if inventory is not None else sc.live.attach
    if not engines:
        raise UserError(f"{scenario}: name the engines to serve: --inventory FILE (role: {{url, kv_side_channel}}) or "
                        "live.attach in the scenario")
    if sc.live.model_dir is None and front == "pdd-router":  # the PD proxy reads no model: it forwards
        raise UserError(f"{scenario}: give live.model_dir (a copy of the served model's folder; config.json is "
                        "enough): the PDD router's KV bytes per token come from it")
    sc = sc.model_copy(update={"live": sc.live.model_copy(update={"attach": engines})})
    check_attached_engines(sc)  # roles, health, served model, side channels: refused before listening
    return sc, attached(kind, PLACEMENTS[kind], engine_specs(sc, sc.live.model_dir), sc.live)[1]


def build_app(front: str, sc, specs, warm_up: bool):
    """The front's own app (the one live runs use) with the service's additions."""
    from pddbench.live.service import add_service
    from pddbench.live.tiny_model import kv_bytes_per_token

    warm = sc.live.served_model_name if warm_up else None
    if front == "pdd-router":
        from pddbench.live.deploy import router_config
        from pddbench.live.router.app import ROUTER, make_app

        app = make_app(router_config(sc, specs, kv_bytes_per_token(sc.live.model_dir)), warm_model=warm)
        session_of = lambda a: a[ROUTER].session  # noqa: E731
    else:
        from pddbench.live.pd_proxy import UPSTREAMS, make_app as proxy_app

        app = proxy_app([specs[0].url], [specs[1].url], warm)
        session_of = lambda a: a[UPSTREAMS].session  # noqa: E731
    add_service(app, {s.name: s.url for s in specs}, session_of)
    return app


def _short(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def log_handler(path: Path | None) -> logging.Handler:
    """Where the JSON lines go: stderr, or a file appended to as the service runs (a character
    device or a FIFO with a reader is written into; a folder or a FIFO nobody reads is refused)."""
    import os
    import stat

    from pddbench.core.io import check_out_place, output_target

    if path is None:
        return logging.StreamHandler(sys.stderr)
    check_out_place(path, "--log", folder=False)
    target = output_target(path).path
    if target.exists() and stat.S_ISFIFO(os.stat(target).st_mode):
        try:
            fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            raise UserError(f"--log {path} is a FIFO that nobody reads; start its reader first") from None
        os.set_blocking(fd, True)
        return logging.StreamHandler(os.fdopen(fd, "a", buffering=1))
    return logging.FileHandler(target, delay=True)  # made at the first line: a refusal leaves no file


def serve(front: str, scenario, overrides: list[str], inventory: Path | None, host: str, port: int, warm_up: bool,
          log_file: Path | None) -> None:

    import aiohttp
    from aiohttp import web

    from pddbench.live.service import LOG, JsonLines

    if front not in FRONT_KINDS:
        raise UserError(f"serve {front}: expected {' or '.join(FRONT_KINDS)}")
    check_bind(host)
    handler = log_handler(log_file)
    try:
        sc, specs = prepare(front, scenario, overrides, inventory)
        app = build_app(front, sc, specs, warm_up)
    except BaseException:
        handler.close()
        raise
    handler.setFormatter(JsonLines())
    LOG.addHandler(handler)
    LOG.setLevel(logging.INFO)
    LOG.propagate = False
    LOG.info(json.dumps({"event": "start", "front": front, "scenario": sc.name, "listen": f"http://{host}:{port}",
                         "engines": {s.name: s.url for s in specs}}))
    stopped_by: list[int] = []
    try:
        with _heard(stopped_by):  # aiohttp's own handlers would end a Ctrl-C'd service with exit 0
            web.run_app(app, host=host, port=port, print=None, access_log=None, handle_signals=False)
    except aiohttp.ClientError as exc:  # the warm-up over the engines, before listening
        raise UserError(f"serve {front}: the warm-up request over the engines failed ({_short(exc)}); check them "
                        "with /health on each, or start with --no-warm-up") from None
    except OSError as exc:
        raise UserError(bind_error(host, port, exc) or f"serve {front}: {_short(exc)}") from None
    finally:
        LOG.info(json.dumps({"event": "stop", "front": front}))
        LOG.removeHandler(handler)
        handler.close()
    if stopped_by:  # a clean stop on a signal is still an interrupted command: exit 130 (143 on SIGTERM)
        raise KeyboardInterrupt(f"interrupted; serve {front} stopped (in-flight requests cancelled), nothing written "
                                "but its log lines")


def bind_error(host: str, port: int, exc: OSError) -> str | None:
    """What a failed listen means, for the part the user typed that caused it: a port in use or
    below 1024 without root, or an address this host does not have (its namespace not up)."""
    import errno

    if exc.errno == errno.EADDRINUSE:
        return f"--port {port}: another process already listens on {host}:{port}; choose another port or stop it"
    if exc.errno == errno.EACCES:
        return f"--port {port}: ports below 1024 need root; choose a port from 1024 to 65535"
    if exc.errno == errno.EADDRNOTAVAIL:
        return (f"--host {host}: no interface of this network namespace has that address ({exc.strerror}); run "
                "inside the namespace that has it (`pddbench netem up` makes pddb-dc-a / pddb-dc-b) or use 127.0.0.1")
    return None


class _heard:
    """SIGINT and SIGTERM stop the service (KeyboardInterrupt: aiohttp cleans up and returns),
    and are recorded so the command can exit 130 / 143 rather than 0."""

    def __init__(self, heard: list[int]):
        self.heard = heard

    def __enter__(self):
        import signal

        self._old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        def handler(signum, frame):
            self.heard.append(signum)
            old = self._old[signum]
            if callable(old):
                old(signum, frame)  # the CLI's: marks a SIGTERM, raises KeyboardInterrupt
            raise KeyboardInterrupt
        for sig in self._old:
            if self._old[sig] is not signal.SIG_IGN:
                signal.signal(sig, handler)
        return self

    def __exit__(self, *exc) -> None:
        import signal

        for sig, old in self._old.items():
            signal.signal(sig, old)
