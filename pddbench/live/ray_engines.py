"""Engines placed across hosts by Ray (`live.ray_address`, issue 28.3), in EngineGroup's place.

Each engine is started by a Ray actor on a node of its datacenter: the actor asks for a sliver of
the custom resource `dc_<datacenter>` (the role's datacenter: P and RLD in a, D across datacenters
and MD in b), so Ray places it only on nodes started with it (`ray start --resources
'{"dc_a": 8}'`). The actor launches vLLM on its node, listening on the node's address, and reports
health and counters; the run's front and client talk to the engines at those addresses, across
whatever network lies between the nodes (a real WAN, or netem between namespaces acting as
hosts). Nothing is emulated by the run itself: between real hosts the WAN is `pddbench netem up
--dev --peer` on each side.

What crosses the network is JSON text (the engine's settings out, health and counters back).
Teardown on any exit, Ctrl-C and SIGTERM included: every actor stops its engine (the whole
process group), then is killed; an engine whose actor dies anyway gets SIGKILL from the kernel
(PR_SET_PDEATHSIG), so no engine outlives the run."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path

from pddbench.core.errors import UserError
from pddbench.live.engines import Engine, EngineSpec, _interrupt_in
from pddbench.schema.runtime_config import LIVE_ROLES, role_of

START_S = 300.0  # an engine placed, started and healthy (a model load on a busy node)
STOP_S = 60.0


def watchdog(action: str, env: dict | None = None):
    """A process that runs the Python `action` once this process (the actor) is gone: Ray kills
    actors without warning (a driver killed, a node lost), and what the actor started must not
    outlive it. Its own session, so the actor's death does not take it along."""
    import subprocess
    import sys

    code = ("import os, sys, time\nparent = int(sys.argv[1])\n"
            "while os.path.exists(f'/proc/{parent}'):\n    time.sleep(0.5)\n" + action)
    return subprocess.Popen([sys.executable, "-c", code, str(os.getpid())], env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _end(proc) -> None:
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


class EngineActor:
    """One engine on the Ray node this actor was placed on. Answers stop() while start() waits
    (max_concurrency 2): a stop that lands first keeps the engine from starting at all."""

    def __init__(self) -> None:
        import threading

        self.engine: Engine | None = None
        self.guard = None
        self.lock = threading.Lock()
        self.stopping = False

    def node_ip(self) -> str:
        import ray

        return ray.util.get_node_ip_address()

    def start(self, spec_json: str, log_dir: str) -> str:
        try:
            spec = spec_from_json(spec_json)
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            with self.lock:
                if self.stopping:
                    return json.dumps({"error": "stopped before it started"})
                self.engine = Engine(spec, Path(log_dir), die_with_parent=True)
                self.engine.start()
                # the engine's whole process group (API server, engine core, workers) dies with us
                self.guard = watchdog(f"import signal\ntry:\n    os.killpg({self.engine.proc.pid}, signal.SIGKILL)\n"
                                      "except ProcessLookupError:\n    pass\n")
            self.engine.wait_healthy(START_S)
        except Exception as exc:  # any failure on the node, as one line for the driver
            self.stop()
            return json.dumps({"error": f"{spec_name(spec_json)} on {self.node_ip()}: {exc}"})
        return json.dumps({"url": spec.url})

    def metrics(self) -> str:
        return json.dumps(self.engine.metrics() if self.engine else {})

    def stop(self) -> str:
        with self.lock:
            self.stopping = True
            engine, self.engine = self.engine, None
        if engine is not None:
            engine.stop()
        _end(self.guard)
        return "stopped"


class WanActor:
    """The WAN profile on one node for the run (`pddbench netem up --dev --peer`, host mode), in a
    state folder of the node's own: several nodes may share one machine (namespaces as hosts).
    A watchdog takes it down if the actor dies first."""

    def __init__(self) -> None:
        self.env: dict | None = None
        self.profile: Path | None = None
        self.guard = None

    def up(self, profile_json: str, dev: str, peer: str, sends: str, tag: str) -> str:
        import subprocess
        import sys
        import tempfile

        state = Path(tempfile.gettempdir()) / f"pddbench-netem-ray-{tag}"
        self.env = {**os.environ, "PDDBENCH_NETEM_STATE": str(state)}
        self.profile = state.with_suffix(".yaml")
        self.profile.write_text(profile_json)  # JSON is YAML
        self.guard = watchdog("import subprocess\nsubprocess.run([sys.executable, '-m', 'pddbench', 'netem', 'down'], "
                              "capture_output=True)\n" f"os.unlink({str(self.profile)!r})\n", self.env)
        res = subprocess.run([sys.executable, "-m", "pddbench", "netem", "up", str(self.profile), "--dev", dev, "--peer",
                              peer, "--sends", sends], env=self.env, capture_output=True, text=True, timeout=180)
        if res.returncode != 0:
            self.down()
            return json.dumps({"error": (res.stderr or res.stdout).strip().splitlines()[-1:]})
        return (state / "state.json").read_text()

    def down(self) -> str:
        import subprocess
        import sys

        _end(self.guard)
        if self.env is None:
            return "{}"
        res = subprocess.run([sys.executable, "-m", "pddbench", "netem", "down"], env=self.env, capture_output=True,
                             text=True, timeout=120)
        self.env = None
        self.profile.unlink(missing_ok=True)
        return json.dumps({"rc": res.returncode, "error": (res.stderr or "").strip()[-300:] if res.returncode else ""})


def spec_name(spec_json: str) -> str:
    try:
        return json.loads(spec_json)["name"]
    except (ValueError, KeyError, TypeError):
        return "an engine"


def spec_to_json(spec: EngineSpec) -> str:
    return json.dumps(dataclasses.asdict(spec))


def spec_from_json(text: str) -> EngineSpec:
    d = json.loads(text)
    for k in ("cpus", "gpus", "extra_args"):
        if d.get(k) is not None:
            d[k] = tuple(d[k])
    return EngineSpec(**d)


def datacenter_of(kind: str, name: str) -> str:
    return LIVE_ROLES[kind][role_of(name)]


def check_datacenters(ray, kind: str, given: str) -> None:
    """Every datacenter the kind's roles sit in has a node with its resource, or one line."""
    have = ray.cluster_resources()
    for dc in sorted(set(LIVE_ROLES[kind].values())):
        if have.get(f"dc_{dc}", 0) <= 0:
            raise UserError(f"{given}: no node of the Ray cluster has the resource dc_{dc}, where a {kind} deployment "
                            f"puts {', '.join(r for r, d in LIVE_ROLES[kind].items() if d == dc)}; start that "
                            f"datacenter's nodes with --resources '{{\"dc_{dc}\": 8}}'")


class RayEngines:
    """EngineGroup's interface over Ray actors: enter starts every engine on a node of its
    datacenter (in parallel) and waits until all are healthy; `specs` are then the engines as
    they run (the node's address in place of a namespace); exit stops them all."""

    def __init__(self, kind: str, specs: list[EngineSpec], log_dir: Path, address: str, wan=None, profile=None):
        """`wan` (live.ray_wan, datacenter -> {dev, peer}) with `profile` (the scenario's WAN): that
        profile on every node of each datacenter for the run, before any engine starts."""
        self.kind, self.address, self.log_dir = kind, address, log_dir
        self.specs = list(specs)
        self.actors: list = []
        self.wan, self.profile = wan, profile
        self.wan_actors: list = []
        self.wan_states: list[dict] = []  # what each node applied, for the summary
        self.ray = None

    def __enter__(self) -> "RayEngines":
        from pddbench.core.ray_cluster import connect_ray

        self._old_term = signal.signal(signal.SIGTERM, _interrupt_in(os.getpid()))
        try:
            self.ray, _, self._ray_log = connect_ray(self.address, None)
            self._start()
        except BaseException:
            self.stop()
            signal.signal(signal.SIGTERM, self._old_term)
            raise
        return self

    def _shape_nodes(self) -> None:
        """The WAN on every alive node of each datacenter: a's nodes send forward, b's reverse."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self.ray
        remote = ray.remote(WanActor)
        calls = []
        for dc, side in sorted(self.wan.items()):
            for node in ray.nodes():
                if not node.get("Alive") or node.get("Resources", {}).get(f"dc_{dc}", 0) <= 0:
                    continue
                actor = remote.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
                    node["NodeID"], soft=False)).remote()
                self.wan_actors.append(actor)
                sends = "forward" if dc == "a" else "reverse"
                calls.append((dc, node["NodeManagerAddress"], side, actor.up.remote(
                    self.profile.model_dump_json(), side.dev, side.peer, sends, node["NodeID"][:12])))
        for dc, ip, side, call in calls:
            got = json.loads(self._get(call, 240, f"live.ray_wan.{dc} on node {ip}"))
            if "error" in got:
                raise UserError(f"live.ray_wan.{dc} on node {ip} ({side.dev}, {side.peer}): "
                                f"{' '.join(got['error']) or 'netem up failed'}")
            self.wan_states.append({"datacenter": dc, "node": ip, "dev": side.dev, "peer": got.get("peer"),
                                    "sends": got.get("sends"), "shaping": got.get("shaping")})

    def _start(self) -> None:
        ray = self.ray
        check_datacenters(ray, self.kind, f"live.ray_address {self.address}")
        if self.wan:
            self._shape_nodes()
        remote = ray.remote(EngineActor)
        for s in self.specs:
            dc = datacenter_of(self.kind, s.name)
            self.actors.append(remote.options(num_cpus=0, resources={f"dc_{dc}": 0.001}, max_concurrency=2,
                                              name=None).remote())
        ips = self._get([a.node_ip.remote() for a in self.actors], START_S, "placing the engines")
        # on the node: its own address, no namespace of ours (the node is the datacenter)
        self.specs = [dataclasses.replace(s, host=ip, netns=None) for s, ip in zip(self.specs, ips)]
        started = self._get([a.start.remote(spec_to_json(s), str(self.log_dir)) for a, s in zip(self.actors, self.specs)],
                            START_S + 60, "starting the engines")
        errors = [json.loads(x)["error"] for x in started if "error" in json.loads(x)]
        if errors:
            raise UserError(errors[0])

    def _get(self, refs, timeout_s: float, doing: str):
        """ray.get, with Ray's failures (a timeout, an actor or node lost) as one line."""
        try:
            return self.ray.get(refs, timeout=timeout_s)
        except Exception as exc:
            if isinstance(exc, UserError):
                raise
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise UserError(f"live.ray_address {self.address}: {doing} failed: {first}") from None

    def __exit__(self, *exc) -> None:
        self.stop()
        signal.signal(signal.SIGTERM, self._old_term)

    def stop(self) -> None:
        """Every engine, then the WAN; a Ctrl-C or SIGTERM meanwhile is held until all is down."""
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            self._stop()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def _stop(self) -> None:
        if self.ray is None:
            return
        ray, actors, self.actors = self.ray, self.actors, []
        if actors:
            try:
                ray.get([a.stop.remote() for a in actors], timeout=STOP_S)
            except Exception:  # an actor already gone: its engine died with it (PDEATHSIG)
                pass
            for a in actors:
                try:
                    ray.kill(a)
                except Exception:
                    pass
        wan, self.wan_actors = self.wan_actors, []
        if wan:  # after the engines: the WAN goes last
            try:
                downs = [json.loads(x) for x in ray.get([a.down.remote() for a in wan], timeout=STOP_S * 2)]
            except Exception:  # a node gone: its actor's watchdog takes its WAN down there
                downs = []
            for d in downs:
                if d.get("rc"):
                    from rich.console import Console

                    Console(stderr=True).print(f"[yellow]warning[/]: netem down on a Ray node failed: {d['error']}; "
                                               "run `pddbench netem down` there", highlight=False)
            for a in wan:
                try:
                    ray.kill(a)
                except Exception:
                    pass
        from pddbench.core.ray_cluster import disconnect_ray

        disconnect_ray(ray, self._ray_log)
        self.ray = None

    def metrics(self) -> dict[str, dict[str, float]]:
        got = self.ray.get([a.metrics.remote() for a in self.actors], timeout=60)
        return {s.name: json.loads(m) for s, m in zip(self.specs, got)}
