"""`pddbench netem up|down|status`: build the emulated WAN, tear it down, report it.

State lives in /run/pddbench-netem/ (state.json, resolved profile, delay-line pid/ready/stats
files). `down` is idempotent and also removes what a crashed run left: every pddb- namespace and
veth, and every delay line recorded there or found by its command line.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from netem.link_model import effective_rate_gbps
from netem.profile import LinkProfile
from netem.topology import Topology, create, destroy_namespaces, ns_exec, our_namespaces, read_tcp_settings

STATE_DIR = Path(os.environ.get("PDDBENCH_NETEM_STATE", "/run/pddbench-netem"))
RULE_COMMENT = "pddbench"
_STARTED: dict[str, subprocess.Popen] = {}  # delay lines started by this process, for exit codes
QUEUE = 0


class NetemError(RuntimeError):
    pass


def _require_root() -> None:
    if os.geteuid() != 0:
        raise NetemError("network emulation needs root (namespaces, qdiscs, iptables); run as root "
                         "or use the simulator (runtime: sim), which needs none")


def probe() -> dict:
    """What this host can do, tried for real: kernel netem, NFQUEUE + iptables, root."""
    from netem.kernel_netem import kernel_netem_available

    info = {"root": os.geteuid() == 0, "iptables": shutil.which("iptables") is not None}
    if info["root"]:
        ok, reason = kernel_netem_available()
    else:
        ok, reason = False, "not root"
    info["kernel_netem"], info["kernel_netem_reason"] = ok, reason
    info["nfqueue"] = info["root"] and info["iptables"] and Path("/proc/net/netfilter").exists()
    if ok:
        info["backend"] = "kernel-netem"
    elif info["nfqueue"]:
        info["backend"] = "tbf+nfqueue"
    else:
        info["backend"] = None
    return info


def _delay_line_cmd(host_ns: str | None, direction: str) -> list[str]:
    """The delay line's command: in `host_ns`, or (None) in this namespace (host mode)."""
    d = STATE_DIR
    inside = ["ip", "netns", "exec", host_ns] if host_ns else []
    return [*inside, sys.executable, "-m", "netem.delayline", "--queue", str(QUEUE),
            "--profile", str(d / "profile.json"), "--direction", direction,
            "--stats", str(d / f"stats-{direction}.json"), "--ready", str(d / f"ready-{direction}.json")]


def _start_delay_line(host_ns: str | None, direction: str) -> None:
    proc = subprocess.Popen(_delay_line_cmd(host_ns, direction), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=open(STATE_DIR / f"delayline-{direction}.log", "w"),
                            start_new_session=True)
    (STATE_DIR / f"pid-{direction}").write_text(str(proc.pid))
    _STARTED[direction] = proc


def up(profile: LinkProfile, backend: str = "auto", ready_timeout_s: float = 60.0) -> dict:
    """Create dc-a/dc-b and shape the link both ways; on any failure or Ctrl-C, tear down."""
    _require_root()
    if our_namespaces() or (STATE_DIR / "state.json").exists():
        raise NetemError("an emulated WAN is already up; run `pddbench netem down` first")
    info = probe()
    chosen = info["backend"] if backend == "auto" else backend
    if chosen is None:
        raise NetemError("no emulation backend here: need root, iptables (apt-get install iptables) and NFQUEUE")
    topo = Topology.two_dc()
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    try:
        create(topo)
        (STATE_DIR / "profile.json").write_text(profile.model_dump_json())
        shaping = {}
        # Rate is shaped on the sender's egress; delay is applied on the receiver's ingress
        # (PREROUTING): a packet held at the sender's egress would still count against its
        # socket (TCP Small Queues) and throttle the flow to a few packets per delay.
        for sender, receiver, direction in ((topo.host("a"), topo.host("b"), "forward"),
                                            (topo.host("b"), topo.host("a"), "reverse")):
            rate = effective_rate_gbps(profile, direction=direction, emulated=True)
            if chosen == "kernel-netem":
                from netem.kernel_netem import apply_netem

                apply_netem(sender.netns, sender.ifname, profile, direction)
                shaping[direction] = "netem"
                continue
            if rate is not None:
                from netem.shaping import apply_rate

                shaping[direction] = apply_rate(sender.netns, sender.ifname, rate)
            ns_exec(receiver.netns, "iptables", "-t", "mangle", "-A", "PREROUTING", "-i", receiver.ifname,
                    "-m", "comment", "--comment", RULE_COMMENT, "-j", "NFQUEUE", "--queue-num", str(QUEUE))
            _start_delay_line(receiver.netns, direction)
        if chosen != "kernel-netem":
            _wait_ready(ready_timeout_s)
        state = {"backend": chosen, "profile": profile.model_dump(mode="json"), "topology": topo.to_dict(),
                 "tcp": {h.dc: read_tcp_settings(h.netns) for h in topo.hosts}, "shaping": shaping,
                 "rate_scale": profile.rate_scale, "probe": info, "started": time.time()}
        (STATE_DIR / "state.json").write_text(json.dumps(state, indent=2))
        return state
    except BaseException:
        down()
        raise


def up_on_host(profile: LinkProfile, dev: str, peer: str, sends: str = "forward",
               ready_timeout_s: float = 60.0) -> dict:
    """Host mode (netem/host_mode.py): shape only this host's traffic with `peer` on `dev`; on any
    failure or Ctrl-C, remove what was added."""
    from netem.host_mode import HostModeError, check_args, up_host

    _require_root()
    try:
        check_args(dev, peer)  # the interface and prefix first: a refusal touches nothing
    except HostModeError as exc:
        raise NetemError(str(exc)) from None
    if (STATE_DIR / "state.json").exists() or (STATE_DIR / "host.json").exists():
        raise NetemError("an emulated WAN is already up; run `pddbench netem down` first")
    info = probe()
    if not info["nfqueue"]:
        raise NetemError("host mode needs root, iptables (apt-get install iptables) and NFQUEUE")
    made = not STATE_DIR.exists()
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    try:
        (STATE_DIR / "profile.json").write_text(profile.model_dump_json())
        state = up_host(STATE_DIR, profile, dev, peer, sends, QUEUE, lambda _cmd, d: _start_delay_line(None, d))
        _wait_ready(ready_timeout_s, (state["receives"],))
        state.update(profile=profile.model_dump(mode="json"), rate_scale=profile.rate_scale, probe=info,
                     tcp={"this host": read_tcp_settings(None)}, started=time.time())
        (STATE_DIR / "state.json").write_text(json.dumps(state, indent=2))
        return state
    except HostModeError as exc:
        _undo_host_start(made)
        raise NetemError(str(exc)) from None
    except BaseException:
        _undo_host_start(made)
        raise


def _undo_host_start(made_dir: bool) -> None:
    """A host-mode start that failed: only what this invocation added (the delay line it started,
    the rule and qdisc its host.json records, the state folder if it made it, else its files in
    it), never a delay line, rule or namespace of another emulation."""
    from netem.host_mode import undo_host

    for proc in list(_STARTED.values()):
        _stop_started(proc)
    _STARTED.clear()
    undo_host(STATE_DIR)
    if made_dir:
        shutil.rmtree(STATE_DIR, ignore_errors=True)
        return
    for pattern in ("host.json", "profile.json", "pid-*", "ready-*", "stats-*", "delayline-*.log"):
        for f in STATE_DIR.glob(pattern):
            f.unlink(missing_ok=True)


def _stop_started(proc: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _wait_ready(timeout_s: float, directions: tuple[str, ...] = ("forward", "reverse")) -> None:
    deadline = time.monotonic() + timeout_s
    for direction in directions:
        path = STATE_DIR / f"ready-{direction}.json"
        while not path.exists():
            pid = int((STATE_DIR / f"pid-{direction}").read_text())
            proc = _STARTED.get(direction)
            try:
                if proc is not None and proc.pid == pid and proc.poll() is not None:
                    raise ProcessLookupError  # exited (a zombie still answers kill 0)
                os.kill(pid, 0)
            except ProcessLookupError:
                time.sleep(0.2)  # let its last words reach the log
                log = (STATE_DIR / f"delayline-{direction}.log").read_text()[-500:]
                proc = _STARTED.get(direction)
                code = proc.poll() if proc is not None and proc.pid == pid else None
                raise NetemError(f"the {direction} delay line (pid {pid}, exit {code}) died at start: "
                                 f"{log.strip() or 'no output'}") from None
            if time.monotonic() > deadline:
                raise NetemError(f"the {direction} delay line did not start within {timeout_s} s")
            time.sleep(0.05)


def _delay_line_pids() -> list[int]:
    pids = set()
    for f in STATE_DIR.glob("pid-*"):
        try:
            pids.add(int(f.read_text()))
        except ValueError:
            pass
    # a crashed run's lines, found by command line: only those of this state folder (another
    # emulated WAN on this machine, e.g. a host-mode one in a test's namespace, keeps its own)
    out = subprocess.run(["pgrep", "-f", f"netem.delayline .*{STATE_DIR}/"], capture_output=True, text=True).stdout.split()
    pids.update(int(p) for p in out)
    pids.discard(os.getpid())
    return sorted(pids)


def down(host_mode: bool = False) -> dict:
    """Remove everything of ours; safe to call any time, any number of times. In host mode (its
    state says so, or `host_mode`) that is its rule, qdisc and delay line here: no namespace is
    touched."""
    host = host_mode or (STATE_DIR / "host.json").exists()
    killed = []
    for pid in _delay_line_pids():
        try:
            os.killpg(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        killed.append(pid)
    deadline = time.monotonic() + 3
    for pid in killed:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
                time.sleep(0.02)
            except ProcessLookupError:
                break
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    removed = destroy_namespaces() if os.geteuid() == 0 and not host else []
    if os.geteuid() == 0:
        from netem.host_mode import down_host

        removed += down_host(STATE_DIR)
    if STATE_DIR.exists():
        shutil.rmtree(STATE_DIR, ignore_errors=True)
    return {"killed_delay_lines": killed, "removed": removed}


def status() -> dict:
    state_file = STATE_DIR / "state.json"
    if not state_file.exists():
        return {"up": False, "leftover_namespaces": our_namespaces() if os.geteuid() == 0 else []}
    state = json.loads(state_file.read_text())
    alive = {}
    for direction in ("forward", "reverse"):
        f = STATE_DIR / f"pid-{direction}"
        if f.exists():
            pid = int(f.read_text())
            try:
                os.kill(pid, 0)
                alive[direction] = True
            except ProcessLookupError:
                alive[direction] = False
    state.update({"up": True, "delay_lines_alive": alive, "namespaces": our_namespaces()})
    return state
