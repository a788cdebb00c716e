"""The client side of a live run, each as its own process from where the client sits (dc-a across
datacenters): the trace replay, and the engine calibration after it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pddbench.core.errors import UserError
from pddbench.schema.runtime_config import LiveConfig


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
    if cfg.replay_workers > 1:
        args += ["--workers", str(cfg.replay_workers)]
    return args


def run_replay(cfg: LiveConfig, endpoint: str, trace: Path, out: Path, block_size: int, pipeline: str,
               netns: str | None, log: Path, seed: int) -> None:
    """The replay client as its own process, inside `netns` when the client sits in a datacenter;
    `seed` (the scenario's) seeds the arrival process."""
    args = _replay_args(cfg, endpoint, cfg.served_model_name, trace, out, block_size) + ["--pipeline", pipeline,
                                                                                       "--seed", str(seed)]
    _run_client("replay", ["pddbench", *args], netns, log)


def run_capacity_probe(cfg: LiveConfig, endpoint: str, probe_trace: Path, block_size: int, out: Path,
                       netns: str | None, log: Path) -> dict:
    """The closed-loop capacity probe (pddbench/live/capacity_probe.py) through the front; its
    probe.json (`out`) as a dict."""
    _run_client("capacity probe", ["pddbench.live.capacity_probe", "--endpoint", endpoint, "--trace", str(probe_trace),
                                   "--model", cfg.served_model_name,
                                   "--block-size", str(block_size), "--vocab", str(cfg.vocab_lo), str(cfg.vocab_hi),
                                   "--concurrency", str(cfg.probe_concurrency), "--timeout-s", str(cfg.timeout_s),
                                   "--out", str(out)], netns, log)
    return json.loads(out.read_text())


def run_engine_calibration(cfg: LiveConfig, prefill_url: str, decode_url: str, kv_bytes_per_token: int,
                           out: Path, netns: str | None, log: Path, relay_url: str | None = None) -> None:
    """Step times (and the P -> D transfer unless kv_bytes_per_token is 0; PDD: also P -> RLD),
    measured from where the replay client sits."""
    _run_client("engine calibration", ["pddbench.live.engine_calibration", "--prefill", prefill_url,
                                       "--decode", decode_url, "--kv-bytes-per-token", str(kv_bytes_per_token),
                                       *(["--relay", relay_url] if relay_url else []),
                                       "--vocab", str(cfg.vocab_lo), str(cfg.vocab_hi), "--model", cfg.served_model_name,
                                       "--out", str(out)], netns, log)


def _run_client(what: str, module_args: list[str], netns: str | None, log: Path) -> None:
    cmd = [sys.executable, "-m", *module_args]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    res = subprocess.run(cmd, capture_output=True, text=True)
    log.write_text(res.stdout + res.stderr)
    if res.returncode != 0:
        raise UserError(f"{what} failed (exit {res.returncode}); see {log}")
