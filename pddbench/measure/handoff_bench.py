"""`pddbench handoff-bench`: the article's handoff microbenchmark, (a) the incremental KV of N
tokens vs (b) N token ids recomputed on MD, measured over the emulated WAN. The wire and the
engine are measured by pddbench/live/handoff_bench.py; the recompute, without an engine, comes
from the simulator's MD latency model (so this command sits above both runtimes)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pddbench.core.errors import UserError
from pddbench.core.io import run_folder
from pddbench.live import handoff_bench as hb
from pddbench.schema.scenario import Scenario, load_scenario


@dataclass(frozen=True)
class BenchSettings:
    """One handoff-bench run, as the command line states it."""
    tokens: int = 100
    kv_bytes_per_token: int | None = None  # None: the scenario's model.kv_bytes_per_token
    trials: int = 200
    profile: str = "cross-city-10g"  # netem profile name or YAML path
    context_tokens: int = 8192
    md_endpoint: str | None = None  # measure the recompute on this engine; None: the scenario's model
    md_model: str = "tiny"
    scenario: str = "paper/pdd"  # a path or a shipped name
    loopback: bool = False
    seed: int = 0


def run_handoff_bench(cfg: BenchSettings, out: Path | None, results: Path) -> tuple[dict, Path]:
    """Measure both handoffs, write handoff_bench.json, trials.csv and the CDF figure into `out`
    (new or empty) or a new results/handoff-bench/<run-id>/; returns the summary and the folder."""
    from netem import load_profile
    from pddbench.live.replay import check_endpoint
    from pddbench.core.io import check_out_options

    if cfg.md_endpoint:
        check_endpoint(cfg.md_endpoint, "--md-endpoint")
    check_out_options(out, results)
    link_profile = load_profile(cfg.profile)  # a bad profile or scenario fails before any folder is made
    sc = load_scenario(cfg.scenario)
    kv_per_token, kv_source = kv_bytes_per_token(cfg, sc)
    with run_folder(out, results, "handoff-bench") as folder:
        recompute, source = measure_recompute(cfg, sc)
        rows, link = hb.measure_over_link(cfg.tokens, kv_per_token, cfg.trials, cfg.seed, link_profile, cfg.loopback)
        meta = {"tokens": cfg.tokens, "kv_bytes_per_token": kv_per_token, "kv_bytes_per_token_from": kv_source,
                "trials": cfg.trials, "context_tokens": cfg.context_tokens, "link": link}
        summary = hb.summarize_bench(rows, recompute, source, meta)
        hb.write_bench(folder.path, rows, recompute, summary)
    return summary, folder.path


def kv_bytes_per_token(cfg: BenchSettings, sc: Scenario) -> tuple[int, str]:
    """The KV bytes per token the KV handoff ships, and where it came from: --kv-bytes-per-token,
    else the scenario's model (the one place the article's geometry is stated)."""
    if cfg.kv_bytes_per_token is not None:
        return cfg.kv_bytes_per_token, "--kv-bytes-per-token"
    if sc.model is None:
        raise UserError(f"{cfg.scenario}: states no model.kv_bytes_per_token (a live scenario takes it from its "
                        "served model): pass --kv-bytes-per-token or a simulated --scenario")
    return sc.model.kv_bytes_per_token, f"scenario {cfg.scenario}"


def measure_recompute(cfg: BenchSettings, sc: Scenario) -> tuple[list[float], str]:
    """MD's recompute per trial and where it came from (a real engine, or one model estimate)."""
    if cfg.md_endpoint:
        ms = hb.recompute_engine_ms(cfg.md_endpoint, cfg.md_model, cfg.tokens, cfg.context_tokens, cfg.trials, cfg.seed)
        return ms, f"engine:{cfg.md_endpoint}"
    one, source = recompute_model_ms(sc, cfg.tokens, cfg.context_tokens)
    return [one] * cfg.trials, source


def recompute_model_ms(scenario: str | Scenario, tokens: int, context_tokens: int) -> tuple[float, str]:
    """One extend step of `tokens` on the scenario's MD (batch of one, `context_tokens` cached);
    `scenario`: loaded, or a path or shipped name."""
    from pddbench.sim.cluster import latency_model

    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    if sc.deployment is None or sc.deployment.main is None:
        raise UserError(f"{sc.name}: needs a pdd deployment with a 'main' pool for the recompute model")
    model = latency_model(sc, sc.deployment.main)
    return model.decode_ms(1, context_tokens, extend_tokens=tokens), f"model:{sc.name}"
