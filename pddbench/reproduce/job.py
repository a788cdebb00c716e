"""The main job (`make run`): analyse the shipped and generated traces, run the paper's
deployments in the simulator over several seeds, compare them, search their capacity, sweep the
bathtub and the sensitivity map, and put every figure of the article beside its simulated value
(the ledger: reproduce.json, report.md, report.html). Everything lands in one new run folder.

Beside the article's figures it compares each deployment's best split at an equal chip budget,
the equal-prefill control and both best splits at common loads (pddbench/reproduce/best_vs_best.py,
pddbench/reproduce/common_load.py), and runs the naive cross-DC regime at a load chosen from measured
capacities (pddbench/reproduce/regime.py).

The simulations and their stages are pddbench/reproduce/tasks.py's. The claims are defined in
pddbench/reproduce/claims.py; each `measure_*` function below turns the runs'
summaries into ledger rows for one group of claims (one value per seed)."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from rich.console import Console

from pddbench.reproduce import best_vs_best as bvb
from pddbench.reproduce import crossover_search
from pddbench.reproduce.beside import Beside
from pddbench.reproduce.designs_figure import designs_figure
from pddbench.reproduce import regime
from pddbench.reproduce import common_load
from pddbench.reproduce.claim_rows import change as _chg
from pddbench.reproduce.claim_rows import row as _row
from pddbench.reproduce.claim_rows import CONVERGED_PCT, convergence, unsteady, unsteady_reason
from pddbench.reproduce.answer import answer_lines
from pddbench.reproduce.claims import CLAIMS
from pddbench.core.io import new_run_dir, write_json, write_text
from pddbench.measure.capacity import MIN_REQUESTS
from pddbench.reproduce.ledger import Row
from pddbench.reproduce.tasks import (COMMON, HIT_MIX_NAMES, MAP_FULL, MAP_LIGHT, PAPER, PDD_ONLY_AXES, REQUESTS_ENV,
                                      SEARCHED, VARIANTS, Settings, Simulated, cpu_seconds, simulate_all)
from pddbench.core.shipped import MOONCAKE_TRACE
from pddbench.workload.synth import MOONCAKE_LIKE_HIST, PDD_LIKE_HIST, SynthConfig, synthesize

console = Console(stderr=True)
# which deployments' capacities each capacity claim rests on (their convergence checks)
CONVERGENCE_CLAIMS = {cid: ["same-dc-pd", "pdd"] for cid in ("throughput_change", "bcr_change", "cost_per_token_change")}
CONVERGENCE_CLAIMS |= {"throughput_change_best": ["best-same-dc-pd", "best-pdd"],
                       "throughput_change_equal_prefill": ["best-same-dc-pd", "control-pdd"]}
__all__ = ["MAP_FULL", "MAP_LIGHT", "PDD_ONLY_AXES", "REQUESTS_ENV", "Settings", "reproduce"]


def comparison_words(sim: Simulated, common) -> str:
    """The best splits, the control, and at which common loads PDD's TTFT is lower or higher."""
    text = ("Best split vs best split at the article's chip counts (same-DC PD 88 A, PDD 43 A + 32 B; control: PDD "
            "with the baseline's prefill pool): " + "; ".join(f"{n} {p['label']}" for n, p in sim.plan.items()) + ".")
    if len(common):
        text += (f" Common loads {', '.join(f'{x:g}' for x in sim.loads['loads_rps'])} req/s (up to 0.9 x "
                 f"{sim.loads['smaller']}'s capacity): " + common_load.words(common, *COMMON))
    return text


def comparison_rows(s: dict, cap: dict, sim: Simulated, common, cfg: Settings, conv: dict) -> list[Row]:
    """Best split vs best split, the equal-prefill control and the common loads."""
    rows = bvb.measure_rows(s, cap, sim.best, sim.plan, conv)
    if len(common):
        return rows + common_load.measure_rows(common, sim.loads, *COMMON, not cfg.full)
    why = f"No common load: a capacity is 0 ({sim.loads['capacities_rps']} req/s)."
    return rows + [_row("ttft_change_common_light", [], why), _row("ttft_change_common_heavy", [], why)]


# ---------------------------------------------------------------- measurements, one group each


def wan_demand_gbps(r: dict) -> float | None:
    """The WAN KV bytes a run shipped per second of arrivals, in Gbit/s (compare with the line)."""
    span = r["requests_total"] / r["offered_rps"] if r.get("offered_rps") else None
    return r["wan_kv_bytes"] * 8 / 1e9 / span if span else None


def measure_hit_mix(cfg: Settings) -> tuple[list[Row], dict]:
    from pddbench.workload.stats import trace_stats
    from pddbench.workload.trace import load_trace

    mc = trace_stats(load_trace(MOONCAKE_TRACE))
    above = lambda st: sum(st["hit_rate_histogram"]["fraction"][3:])  # buckets 95-97, 97-98, 98-99, 99-100
    gen = [above(trace_stats(synthesize(SynthConfig(requests=max(cfg.requests, 1000), seed=s)))) for s in range(cfg.seeds)]
    return [_row("hit_mix_mooncake", [above(mc)], f"Mooncake mean hit {mc['mean_hit_rate']:.2f}: its mix is "
                 "not the article's (58% below 90%)."),
            _row("hit_mix_generated", gen)], {"mooncake": {k: mc[k] for k in ("requests", "mean_hit_rate")}}


def measure_naive_cross_dc(s: dict, regime_load: dict) -> list[Row]:
    same, cross = s["regime-same-dc-pd"], s["regime-cross-dc-pd"]
    q = lambda runs, p: [r["ttft_ms"][p] / 1000 for r in runs]
    wan = lambda p: [r["wan_kv_ms"][p] / 1000 if r["wan_kv_ms"].get(p) is not None else None for r in cross]
    p50 = sum(q(same, "p50")) / len(same)
    reach = (f" At this load same-DC PD's P50 TTFT is {p50:.2f} s, not seconds: {regime_load['smaller']} bounds the "
             "load before same-DC PD queues; the load-ladder rows ask whether any stable load gets there." if p50 < 1.0 else "")
    return [_row("same_dc_ttft_p50", q(same, "p50"), f"{regime_load['text']}; the load was not chosen by looking "
                 "at any TTFT." + reach),
            _row("cross_dc_ttft_p50", q(cross, "p50"), "WAN KV demand "
                 + ", ".join(f"{wan_demand_gbps(r) or 0:.1f}" for r in cross) + " Gbit/s (per seed) on one "
                 "10 Gbit/s line: where demand exceeds the line, cross-DC TTFT is the line's queue, not latency."),
            _row("cross_dc_ttft_p50_inflation", [c - b for c, b in zip(q(cross, "p50"), q(same, "p50"))]),
            _row("cross_dc_ttft_p90", q(cross, "p90")), _row("cross_dc_ttft_p99", q(cross, "p99")),
            _row("wan_kv_latency_low", wan("p50")), _row("wan_kv_latency_high", wan("p99"))]


def ladder_rungs(results: dict, plan: dict, seeds: int) -> list[dict]:
    """The load ladder's rungs that ran (none when same-DC PD's capacity was 0), one row each."""
    same, cross = regime.MEASURED
    ran = [i for i in range(len(plan["loads_rps"])) if ("ladder", same, i, 0) in results]
    runs = lambda n, i: [results[("ladder", n, i, k)]["summary"] for k in range(seeds)]
    sub = {**plan, "fractions": [plan["fractions"][i] for i in ran], "loads_rps": [plan["loads_rps"][i] for i in ran]}
    return regime.ladder_table([runs(same, i) for i in ran], [runs(cross, i) for i in ran], sub)


def measure_ladder(rungs: list[dict], words: str) -> list[Row]:
    """Same-DC PD's median at its capacity, and the naive cross-DC inflation at the lightest stable
    load where same-DC PD's median is seconds (none: not measurable, and why)."""
    at_cap = next((r for r in rungs if r["fraction"] == 1.0), None)
    hit = regime.seconds_rung(rungs)
    why = "" if hit else (" No stable rung gives same-DC PD a median of seconds, so there is no such load to "
                          "measure the inflation at." if rungs else " No ladder ran: same-DC PD's regime capacity was 0.")
    return [_row("same_dc_ttft_p50_at_capacity", at_cap["same_dc_p50_s_per_seed"] if at_cap else [], words),
            _row("cross_dc_ttft_p50_inflation_seconds", hit["p50_inflation_s"] if hit else [], words + why)]


def measure_drc(s: dict) -> list[Row]:
    vals = [n["wan_kv_bytes"] / p["wan_kv_bytes"] if p["wan_kv_bytes"] else None
            for p, n in zip(s["pdd"], s["pdd-no-drc"])]
    hit = sum(r["p_hit_rate"] for r in s["pdd"]) / len(s["pdd"])
    return [_row("drc_wan_reduction", vals, f"P-side token-weighted hit {hit:.2f}.")]


def measure_headline(s: dict, cap: dict, conv: dict) -> list[Row]:
    ttft = [_chg(p["ttft_ms"]["mean"], b["ttft_ms"]["mean"]) for p, b in zip(s["pdd"], s["same-dc-pd"])]
    regime = [_chg(p["ttft_ms"]["mean"], b["ttft_ms"]["mean"]) for p, b in zip(s["regime-pdd"], s["regime-same-dc-pd"])]
    thr = [_chg(p["throughput_within_sla_rps"], b["throughput_within_sla_rps"]) for p, b in zip(cap["pdd"], cap["same-dc-pd"])]
    bcr = [_chg(p["bcr"], b["bcr"]) for p, b in zip(cap["pdd"], cap["same-dc-pd"])]
    cpt = [_chg(p["cost_per_hour"] / p["throughput_within_sla_rps"], b["cost_per_hour"] / b["throughput_within_sla_rps"])
           if p["throughput_within_sla_rps"] and b["throughput_within_sla_rps"] else None
           for p, b in zip(cap["pdd"], cap["same-dc-pd"])]
    cost = [_chg(p["cost_per_hour"], b["cost_per_hour"]) for p, b in zip(s["pdd"], s["same-dc-pd"])]
    rps = lambda runs: ", ".join(f"{r['throughput_within_sla_rps']:.1f} ({r.get('bound_by')})" for r in runs)
    why = unsteady_reason(cap["pdd"] + cap["same-dc-pd"], [conv.get("pdd"), conv.get("same-dc-pd")])
    return [_row("ttft_change", ttft), _row("ttft_change_regime", regime),
            *unsteady([_row("throughput_change", thr, f"capacity in req/s (bound by) same-DC "
                            f"{rps(cap['same-dc-pd'])}; PDD {rps(cap['pdd'])}."),
                       _row("bcr_change", bcr), _row("cost_per_token_change", cpt)], why),
            _row("hardware_cost_change", cost)]


def measure_relay_share(s: dict) -> list[Row]:
    return [_row("relay_token_share", [r["relay_token_share"] for r in s["pdd-64k-1k-90hit"]])]


def measure_handoff(seeds: int) -> list[Row]:
    """The microbenchmark's model estimates: KV bytes, message bytes, the transfer time of 100
    tokens' KV over the paper's WAN profile (its delay, rate and jitter; one idle line) and MD's
    recompute from the latency model, as `pddbench handoff-bench` estimates them."""
    import random

    from netem import load_profile
    from netem.link_model import effective_delay_ms, effective_rate_gbps, predict_transfer_ms
    from netem.sampling import JitterSampler
    from pddbench.measure.handoff_bench import recompute_model_ms
    from pddbench.policy.pdd import handoff_message_bytes
    from pddbench.schema.scenario import load_scenario

    sc = load_scenario(PAPER / "pdd.yaml")
    kv = sc.model.kv_bytes_per_token * 100
    prof = load_profile(sc.network.wan) if isinstance(sc.network.wan, str) else sc.network.wan
    base = predict_transfer_ms(kv, rate_gbps=effective_rate_gbps(prof), delay_ms=effective_delay_ms(prof),
                               sharing=prof.sharing)
    means, peaks = [], []
    for seed in range(seeds):
        jit = JitterSampler(prof.jitter, random.Random(seed))
        ms = [base + jit.sample_ms() for _ in range(200)]
        means.append(sum(ms) / len(ms))
        peaks.append(max(ms))
    rec, _ = recompute_model_ms(str(PAPER / "pdd.yaml"), 100, 8192)
    return [_row("handoff_kv_kb", [kv / 1024]), _row("handoff_ids_kb", [handoff_message_bytes(100) / 1024]),
            _row("handoff_wan_mean_ms", means, f"{kv / 1e6:.2f} MB at {effective_rate_gbps(prof):g} Gbit/s."),
            _row("handoff_wan_peak_ms", peaks),
            _row("handoff_copy_ms", [], "Live only: `pddbench handoff-bench --md-endpoint` (not part of make run)."),
            _row("handoff_recompute_ms", [rec], "Deterministic model: the max equals the mean.")]


def _handoff_mode_share(r: dict) -> float | None:
    modes = r.get("handoff_modes") or {}
    total = modes.get("catch_up", 0) + modes.get("one_shot", 0)  # handoffs that happened, by mode
    return modes.get("catch_up", 0) / total if total else None


def measure_modes(s: dict) -> list[Row]:
    stall = [_chg(c["handoff_stall_ms"]["p99"], o["handoff_stall_ms"]["p99"]) for c, o in zip(s["pdd-catch-up"], s["pdd-one-shot"])]
    busy = [_chg(c["relay_busy_ms"]["mean"], o["relay_busy_ms"]["mean"]) for c, o in zip(s["pdd-catch-up"], s["pdd-one-shot"])]
    return [_row("catchup_stall_change", stall), _row("catchup_relay_busy_change", busy),
            _row("adaptive_catchup_share", [_handoff_mode_share(r) for r in s["pdd"]])]


def measure_relay_only(s: dict) -> list[Row]:
    ab, pdd = s["pdd-relay-only-ablation"], s["pdd"]
    return [_row("relay_only_md_hit_gap", [r["decode_hit_rate"] - r["p_hit_rate"] for r in ab]),
            _row("relay_only_relay_share_change", [_chg(a["relay_token_share"], p["relay_token_share"]) for a, p in zip(ab, pdd)]),
            _row("relay_only_ttft_p90_change", [_chg(a["ttft_ms"]["p90"], p["ttft_ms"]["p90"]) for a, p in zip(ab, pdd)])]


def measure_singular(s: dict) -> list[Row]:
    share = [r["singular_flows"] / r["requests_total"] if r["requests_total"] else None for r in s["pdd"]]
    saved = []
    for p, n in zip(s["pdd"], s["pdd-no-singular-filter"]):
        by = p.get("wan_kv_bytes_saved_by_reason") or {}
        would = p["wan_kv_bytes"] + by.get("singular_flow", 0)  # what PDD would have sent without the filter
        saved.append(by.get("singular_flow", 0) / would if would else None)
    aborted = s["pdd"][0].get("aborted_transfers_by_reason")
    return [_row("singular_share", share), _row("singular_wan_saved", saved, f"Aborted transfers by reason (seed 0): {aborted}.")]


def bathtub_table(results: dict):
    import pandas as pd

    rows = {}
    for key, res in results.items():
        if key[0] == "bathtub" and isinstance(res, dict):
            rows.setdefault(key[2], {})[key[1]] = res["capacity"]["throughput_within_sla_rps"]
    return pd.DataFrame(rows).T.sort_index()


def measure_bathtub(tub) -> list[Row]:
    pdd = tub["pdd"]

    def dip(h: float) -> float | None:
        """A drop: less throughput than at the next lower hit rate (more hit is less work, so
        throughput rises with hit rate unless something, e.g. an unbatched tail chunk, breaks it)."""
        idx = list(tub.index)
        near = min(idx, key=lambda x: abs(x - h))
        i = idx.index(near)
        return None if i == 0 else _chg(pdd.iloc[i], pdd.iloc[i - 1])

    gain = ((tub["pdd"] / tub["same-dc-pd"] - 1) * 100).replace([float("inf")], float("nan"))
    mid = gain[(gain.index > 0.15) & (gain.index < 0.85)].mean()
    ends = gain[(gain.index <= 0.15) | (gain.index >= 0.85)].mean()
    return [_row("bathtub_dip_20", [dip(0.2)]), _row("bathtub_dip_40", [dip(0.4)]),
            _row("bathtub_middle", [None if math.isnan(mid - ends) else float(mid - ends)],
                 f"Gain at the ends {ends:+.1f} %, in the middle {mid:+.1f} % (one seed).")]


# ---------------------------------------------------------------- the map


def map_table(results: dict, grid: dict):
    """One row per PDD point: axes, PDD and same-DC capacity and mean TTFT, and both changes."""
    import pandas as pd

    got: dict = {}
    for key, res in results.items():
        if key[0] == "map" and isinstance(res, dict):
            got[(key[1], key[2], key[3])] = res
    rows = []
    for (dep, measure, k), res in got.items():
        if dep != "pdd" or measure != "capacity":
            continue
        axes = json.loads(k)
        same_key = json.dumps({a: v for a, v in axes.items() if a not in PDD_ONLY_AXES}, sort_keys=True)
        p_run, b_run = got[("pdd", "run", k)]["summary"], got[("same-dc-pd", "run", same_key)]["summary"]
        b_cap = got[("same-dc-pd", "capacity", same_key)]["capacity"]
        row = {a: (HIT_MIX_NAMES.get(tuple(v), str(v)) if isinstance(v, list) else v) for a, v in axes.items()}
        row.update({"pdd_rps": res["capacity"]["throughput_within_sla_rps"], "same_dc_rps": b_cap["throughput_within_sla_rps"],
                    "throughput_change_pct": _chg(res["capacity"]["throughput_within_sla_rps"], b_cap["throughput_within_sla_rps"]),
                    "ttft_change_pct": _chg(p_run["ttft_ms"]["mean"], b_run["ttft_ms"]["mean"])})
        rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- the whole job


def analyse_traces(out: Path, cfg: Settings) -> dict:
    from pddbench.report.trace_figures import bucket_mix_over_time, hit_rate_cdf
    from pddbench.workload.stats import public, trace_stats
    from pddbench.workload.trace import load_trace, write_trace

    traces = {"mooncake-synthetic": load_trace(MOONCAKE_TRACE)}
    for name, hist in (("agentic-pdd-like", PDD_LIKE_HIST), ("agentic-mooncake-like", MOONCAKE_LIKE_HIST)):
        reqs = synthesize(SynthConfig(requests=max(cfg.requests, 1000), seed=0, target_hist=hist))
        write_trace(out / "traces" / f"{name}.jsonl", reqs)
        traces[name] = reqs
    overview = {}
    for name, reqs in traces.items():
        stats = trace_stats(reqs)
        folder = out / "traces" / name
        write_json(folder / "stats.json", public(stats))
        bucket_mix_over_time(stats, folder / "hit_mix_over_time.png")
        hit_rate_cdf(stats["_per_request_hit_rate"], folder / "hit_rate_cdf.png", label=name)
        overview[name] = {k: stats[k] for k in ("requests", "mean_hit_rate", "token_weighted_hit_rate",
                                                "input_length", "output_length", "arrival_rate_rps")}
        overview[name]["hit_rate_histogram"] = stats["hit_rate_histogram"]["fraction"]
    return overview


def operating_point(s: dict, traces: dict, cfg: Settings, regime_load: dict, ladder: dict) -> dict:
    """The load and prompt sizes every figure rests on, and the naive cross-DC inflation."""
    g = traces["agentic-pdd-like"]
    inflation = {}
    for regime, (same, cross) in {"base": ("same-dc-pd", "cross-dc-pd"),
                                  "regime": ("regime-same-dc-pd", "regime-cross-dc-pd")}.items():
        inflation[regime] = {f"{d}_{p}_s": round(sum(r["ttft_ms"][p] for r in s[n]) / len(s[n]) / 1000, 3)
                             for d, n in (("same_dc", same), ("cross_dc", cross)) for p in ("p50", "p90", "p99")}
        inflation[regime]["offered_rps"] = round(s[same][0]["offered_rps"] or 0, 2)
    return {"workload": "generated agentic trace, PDD-like hit mix", "requests": cfg.requests, "seeds": cfg.seeds,
            "base_load_rps": round(s["same-dc-pd"][0]["offered_rps"] or 0, 2),
            "regime_load_rps": inflation["regime"]["offered_rps"],
            "regime_requests": s["regime-same-dc-pd"][0]["requests_total"], "regime_choice": regime_load,
            "input_tokens": {k: g["input_length"][k] for k in ("p50", "p90", "p99")},
            "output_tokens": {k: g["output_length"][k] for k in ("p50", "p90")},
            "mean_hit_rate": round(g["mean_hit_rate"], 3), "sla": s["pdd"][0]["sla"], "naive_cross_dc": inflation,
            "load_ladder": ladder}


def context_line(op: dict, cfg: Settings) -> str:
    inf = op["naive_cross_dc"]
    fmt = lambda d, who: " / ".join(f"{d[f'{who}_{p}_s']:.2f}" for p in ("p50", "p90", "p99"))
    sla = op["sla"]
    return (f"Simulated on the generated agentic trace (PDD-like hit mix, mean hit {op['mean_hit_rate']:.2f}; input "
            f"tokens p50/p90/p99 {op['input_tokens']['p50']:,.0f} / {op['input_tokens']['p90']:,.0f} / "
            f"{op['input_tokens']['p99']:,.0f}; output p50 {op['output_tokens']['p50']:,.0f}), {cfg.requests:,} requests "
            f"per run, seeds 0..{cfg.seeds - 1}; base load {op['base_load_rps']} req/s, regime load "
            f"{op['regime_load_rps']} req/s ({op['regime_requests']:,} requests; {op['regime_choice']['text']}); SLA P{sla.get('percentile', 90):g} TTFT "
            f"{sla.get('ttft_ms', 0) / 1000:g} s, TPOT {sla.get('tpot_ms', 0):g} ms. Naive cross-DC TTFT p50/p90/p99 (s): "
            f"base load same-DC {fmt(inf['base'], 'same_dc')} -> cross-DC {fmt(inf['base'], 'cross_dc')}; regime same-DC "
            f"{fmt(inf['regime'], 'same_dc')} -> cross-DC {fmt(inf['regime'], 'cross_dc')}. {op['load_ladder']['words']} "
            "Assumptions: scenarios/paper/*.yaml; verdict tolerances: pddbench/reproduce/claims.py.")


def ledger_rows(s: dict, cap: dict, tub, cfg: Settings, regime_load: dict, ladder: dict,
                comparison: list[Row], conv: dict) -> tuple[list[Row], dict]:
    """Every claim's row; `comparison`: the best-vs-best, control and common-load rows."""
    mix_rows, mix_info = measure_hit_mix(cfg)
    rows = (mix_rows + measure_naive_cross_dc(s, regime_load) + measure_ladder(ladder["rungs"], ladder["words"])
            + measure_drc(s) + measure_headline(s, cap, conv)
            + measure_relay_share(s) + measure_handoff(cfg.seeds) + measure_modes(s) + measure_relay_only(s)
            + measure_singular(s) + measure_bathtub(tub) + comparison)
    order = {c.id: i for i, c in enumerate(CLAIMS)}
    rows.sort(key=lambda r: order[r.claim.id])
    return rows, mix_info


def reproduce(results_root: Path, jobs: int | None = None, full: bool = False, ray: str | None = None,
              requests: int | None = None, seeds: int = 3, update_readme: Path | None = None) -> Path:
    """`jobs`: worker processes (None: all cores). Writes the ledger (reproduce.json, report.md,
    report.html), figures, run folders, comparisons, sweeps; with `update_readme`, regenerates
    that README's section between the ledger markers."""
    from pddbench.reproduce.ledger_report import report_html, report_markdown, verdict_counts
    from pddbench.reproduce.ledger_report import update_readme as write_readme
    from pddbench.reproduce.sensitivity import describe_map
    from pddbench.core.ray_cluster import check_ray_option

    cfg = Settings.make(full, jobs, ray, requests, seeds)
    check_ray_option(ray)  # an unreachable --ray cluster: one line, before the run folder is made
    out = new_run_dir(results_root, "reproduce")
    console.print(f"[bold]pddbench reproduce[/] ({'full' if full else 'light'} map) -> {out}")
    # the PrfaaS ledger needs nothing the rest measures: it runs beside it, on the cores it leaves idle
    prfaas_beside = Beside(lambda ex: prfaas_section(out, cfg, ex), cfg.jobs, cfg.ray)
    try:
        traces = analyse_traces(out, cfg)
        sim = simulate_all(out, cfg)
        t0 = time.perf_counter()
        crossing = crossover_search.for_reproduce(cfg, sim.best,
                                                  lambda m: console.print(f"  crossovers: {m}", highlight=False))
        sim.walls["crossovers (wall)"] = time.perf_counter() - t0
        prfaas = prfaas_beside.result()
    except BaseException:
        prfaas_beside.cancel()
        raise
    designs_figure(prfaas["result"], out / "prfaas" / "designs.png")  # here: pyplot is not thread-safe
    if prfaas_beside.wall_s is not None:
        sim.walls["prfaas (wall, beside)"] = prfaas_beside.wall_s
    done = crossing["settings"]
    console.print(f"  crossovers: {done['capacity_searches']} capacity searches ({done['warm_started_searches']} "
                  f"warm-started, {done['capacity_probes']} probes), {done['neighbour_checks']} neighbour checks and "
                  f"{done['ttft_simulations']} TTFT simulations in {sim.walls['crossovers (wall)']:.0f} s", highlight=False)
    write_json(out / "crossovers" / "crossovers.json", crossing)
    results, plan, regime_load, loads = sim.results, sim.plan, sim.regime_load, sim.loads
    s = {n: [results[("run", n, k)]["summary"] for k in range(cfg.seeds)] for n in [*VARIANTS, *plan]}
    cap = {n: [results[("capacity", n, k)]["capacity"] for k in range(cfg.seeds)] for n in [*SEARCHED, *plan]}
    folders = {n: results[("run", n, 0)]["folder"] for n in [*VARIANTS, *plan]}
    tub = bathtub_table(results)
    grid = MAP_FULL if cfg.full else MAP_LIGHT
    sens = map_table(results, grid)
    rungs = ladder_rungs(results, sim.ladder, cfg.seeds)
    ladder = {"plan": sim.ladder, "rungs": rungs, "words": regime.ladder_words(rungs, sim.ladder)}
    op = operating_point(s, traces, cfg, regime_load, ladder)
    context = context_line(op, cfg)
    common = common_load.table({k[1:]: v["summary"] for k, v in results.items() if k[0] == "common"}, loads)
    conv = {n: convergence(n, results[("capacity", n, 0)]["capacity"], results[("convergence", n, 0)]["capacity"])
            for n in cap if ("convergence", n, 0) in results}
    rows, mix_info = ledger_rows(s, cap, tub, cfg, regime_load, ladder, comparison_rows(s, cap, sim, common, cfg, conv),
                                 conv)

    _comparisons(folders, plan, out)

    axes = list(grid)
    found = crossing["crossovers"]  # said where they lie inside the map's range (reproduce/map_crossovers.py)
    words = {"throughput_change_pct": describe_map(sens, axes, "throughput_change_pct", "PDD's throughput-within-SLA gain",
                                                   crossovers=found),
             "ttft_change_pct": describe_map(sens, axes, "ttft_change_pct", "PDD's mean TTFT change", good="negative",
                                             crossovers=found)}
    write_json(out / "map" / "map.json", {"axes": grid, "points": sens.to_dict(orient="records"), "words": words})
    figures = _figures(out, rows, folders, op, tub, common, loads, plan, sens, axes, cfg, crossing)
    figures.append(("Designs side by side on the PrfaaS case study's hardware", out / "prfaas" / "designs.png"))
    wall = round(time.perf_counter() - cfg.started, 1)
    map_words = "\n\n".join(words.values())
    comparison = comparison_words(sim, common)
    full_context = (f"{context}\n\n{comparison}\n\nCrossovers: {' '.join(crossing['words'])}\n\nSensitivity map ({len(sens)} PDD points, axes {', '.join(axes)}): "
                    f"{map_words}")
    from pddbench.reproduce.basis import basis
    from pddbench.schema.scenario import load_scenario

    rests_on = basis(load_scenario(PAPER / "pdd.yaml"))
    answer = answer_lines(rows, sens, axes, cfg.seeds, cfg.requests, cfg.full, cfg.map_requests, MIN_REQUESTS,
                          list(conv.values()), crossing, rests_on)
    write_json(out / "reproduce.json", {"answer": answer, "basis": rests_on, "crossovers": crossing["crossovers"],
                                        "crossover_search": {k: v for k, v in crossing.items() if k != "crossovers"},
                                        "convergence": {
        "bound_pct": CONVERGED_PCT, "by_claim": {cid: [conv.get(n) for n in names] for cid, names in CONVERGENCE_CLAIMS.items()}},
        "context": context, "operating_point": op, "settings": {
        "requests": cfg.requests, "seeds": cfg.seeds, "full": cfg.full, "map_points": len(sens),
        "map_requests": cfg.map_requests, "verdict_capacity_requests": cfg.capacity_requests,
        "verdict_capacity_iterations": cfg.capacity_iterations, "bathtub_requests": cfg.bathtub_requests, "capacity_iterations": cfg.iterations,
        "wall_s": wall, "cpu_s": cpu_seconds(), "load_average": os.getloadavg()[0],
        "worker_s_by_kind": {k: round(v, 1) for k, v in sim.walls.items()}}, "rows": [r.to_json() for r in rows], "map_words": words, "traces": traces, "mooncake": mix_info,
        "bathtub": tub.reset_index().rename(columns={"index": "hit_rate"}).to_dict(orient="records"),
        "runs": {n: str(p.relative_to(out)) for n, p in folders.items()}, "comparison_words": comparison,
        "best_vs_best": {"budgets": bvb.BUDGETS, "measured": sim.plan,
                         "search": {n: {k: r[k] for k in ("search", "sizes", "scenario_split", "best")}
                                    for n, r in sim.best.items()},
                         "capacities": {n: cap[n] for n in sim.plan}},
        "common_load": {**loads, "points": common.to_dict(orient="records")},
        "prfaas": {"folder": "prfaas", "rows": prfaas["result"]["claims"], "words": prfaas["result"]["words"]},
        "sizes_check": sim.sizes})
    figs_rel = [(t, str(p.relative_to(out))) for t, p in figures]
    sections = [sizes_section(sim.sizes), prfaas["section"]]
    write_text(out / "report.md", report_markdown(rows, full_context, figs_rel, answer, sections))
    write_text(out / "report.html", report_html(rows, full_context, figures, answer, sections))
    if update_readme is not None:
        write_readme(update_readme, rows, full_context + f"\n\nGenerated by `pddbench reproduce --update-readme` "
                     f"({'full' if cfg.full else 'light'} map, {wall:.0f} s).", answer)
    _print_summary(rows, context, comparison, words, wall, answer)
    title, _text, prow = prfaas["section"]
    console.print(f"{title} (PrfaaS, arXiv 2604.15039): {verdict_counts(prow)}; report.md and prfaas/designs.md",
                  highlight=False, markup=False)
    return out


def sizes_section(sizes: dict | None) -> tuple[str, str, list]:
    """Whether other instance sizes change the best-vs-best throughput sign (full only)."""
    text = (sizes["words"] + " Details: sizes/<deployment>/optimize.json." if sizes else
            "Not searched in the light run: the ledger's best splits use 8-chip instances. `pddbench reproduce "
            "--full` searches sizes 4-16 (a few minutes on 2 cores), as does `pddbench optimize --prune --rank "
            "pools --sizes 4-16`.")
    return ("Other instance sizes", text, [])


PRFAAS_SPEC = "designs/prfaas-case-study.yaml"  # shipped (scenarios/designs/)


def prfaas_section(out: Path, cfg: Settings, executor=None) -> dict:
    """The second paper's ledger (PrfaaS, arXiv 2604.15039): `pddbench designs` on its case study's
    hardware at reproduce's steady trace length and seeds, into OUT/prfaas/; the report's section.
    `executor`: where its simulations run (None: a pool of its own). It may run in a background
    thread, so it draws no figure: reproduce draws prfaas/designs.png (pyplot is not thread-safe)."""
    from pddbench.core.shipped import SCENARIOS
    from pddbench.reproduce.designs import rows_from_json, run_designs

    result, _ = run_designs(SCENARIOS / PRFAAS_SPEC, cfg.jobs, cfg.ray, out / "prfaas", out,
                            on_stage=lambda m: console.print(f"  prfaas: {m}", highlight=False, markup=False),
                            overrides={"requests": cfg.capacity_requests, "seeds": cfg.seeds,
                                       "iterations": cfg.capacity_iterations}, executor=executor, draw=False)
    text = ("Prefill-as-a-Service (Qin et al., arXiv 2604.15039): its case study's figures against the designs "
            f"on its hardware, each at its best split ({PRFAAS_SPEC}, scenarios/prfaas/; prfaas/designs.md). "
            + " ".join(result["words"]))
    return {"result": result, "section": ("The PrfaaS ledger", text, rows_from_json(result["claims"]))}


def _comparisons(folders: dict, plan: dict, out: Path) -> None:
    """The side-by-side comparisons a reader opens first (compare-*/)."""
    from pddbench.measure.compare import compare_runs

    compare_runs([folders[n] for n in ("same-dc-pd", "cross-dc-pd", "pdd")], out / "compare-deployments", baseline="same-dc-pd")
    compare_runs([folders[n] for n in plan], out / "compare-best-splits", baseline="best-same-dc-pd")
    compare_runs([folders[n] for n in ("regime-same-dc-pd", "regime-cross-dc-pd", "regime-pdd")], out / "compare-regime",
                 baseline="regime-same-dc-pd")
    compare_runs([folders[n] for n in ("pdd-one-shot", "pdd-catch-up", "pdd")], out / "compare-handoff-modes",
                 baseline="pdd-one-shot")
    compare_runs([folders[n] for n in ("pdd", "pdd-relay-only-ablation", "pdd-no-singular-filter", "pdd-no-drc")],
                 out / "compare-ablations", baseline="pdd")



def _figures(out: Path, rows, folders: dict, op: dict, tub, common, loads: dict, plan: dict, sens, axes: list,
             cfg, crossing: dict) -> list:
    """Every figure of the report, as (title, path); each title says scenario, load and SLA."""
    from pddbench.reproduce import figures as rf
    from pddbench.reproduce.common_load_figure import common_load_figure
    from pddbench.reproduce.sensitivity import map_heatmaps

    sla_text = (f"SLA P{op['sla'].get('percentile', 90):g} TTFT {op['sla']['ttft_ms'] / 1000:g} s / TPOT "
                f"{op['sla']['tpot_ms']:g} ms")
    load = f"base load {op['base_load_rps']} req/s, {sla_text}"
    figures = [
        ("Article vs simulated, claim by claim", rf.claims_dotplot(rows, out / "figures" / "article_vs_sim.png")),
        ("Naive cross-DC PD: TTFT CDF, same-DC vs cross-DC (regime load)",
         rf.naive_cdf(folders, op, out / "figures" / "naive_cross_dc_cdf.png")),
        *([("Naive cross-DC load ladder: TTFT against load, same-DC vs cross-DC",
            rf.regime_ladder(op["load_ladder"]["rungs"], op["load_ladder"]["plan"], sla_text,
                             out / "figures" / "regime_ladder.png"))] if op["load_ladder"]["rungs"] else []),
        ("Handoff modes: stall and relay occupancy", rf.handoff_modes(folders, load, out / "figures" / "handoff_modes.png")),
        ("P->RLD-only ablation: hit rates over time", rf.relay_only_drift(folders, load, out / "figures" / "relay_only_drift.png")),
        ("Bathtub: throughput within SLA against hit rate", rf.bathtub(tub, out / "figures" / "bathtub.png", sla_text)),
    ]
    if len(common):
        lo, hi = min(loads["loads_rps"]), max(loads["loads_rps"])
        labels = {n: f"{n} {plan[n]['label']}" for n in COMMON}
        figures.append(("Common loads: best splits at the same offered loads", common_load_figure(
            common, labels, f"Common loads, generated agentic trace ({cfg.requests:,} requests, seeds 0..{cfg.seeds - 1}): "
            f"same-DC PD vs PDD at their best splits, {lo:g}..{hi:g} req/s (0.1..0.9 x the smaller capacity)",
            op["sla"], out / "figures" / "common_load.png")))
    from pddbench.reproduce.crossover_figure import crossover_figure, frontier_figure

    figures.append(("Crossovers: where PDD's advantage over same-DC PD changes sign", crossover_figure(
        crossing, f"PDD vs same-DC PD along each searched assumption ({crossing['settings']['requests']:,}-request "
        f"trace, seed 0, best splits at every probe), {sla_text}", out / "crossovers" / "crossovers.png")))
    if crossing.get("frontier"):
        figures.append(("Frontier: where PDD's throughput within SLA beats same-DC PD's (the two axes that move it "
                        "most)", frontier_figure(crossing["frontier"], f"Throughput-within-SLA frontier, "
                                                 f"{crossing['settings']['requests']:,}-request trace, seed 0, {sla_text}",
                                                 out / "crossovers" / "frontier.png")))
    for metric, title in (("throughput_change_pct", "throughput-within-SLA change"), ("ttft_change_pct", "mean TTFT change")):
        figures.append((f"Sensitivity map: PDD vs same-DC {title}",
                        map_heatmaps(sens, axes, metric, f"PDD vs same-DC PD: {title} (%), "
                                     f"{cfg.map_requests} requests per point, SLA TTFT {op['sla']['ttft_ms'] / 1000:g} s",
                                     out / "map" / f"{metric}.png")))
    return figures


def _print_summary(rows, context: str, comparison: str, words: dict, wall: float, answer: list[str]) -> None:
    from pddbench.reproduce.ledger_report import print_ledger

    print_ledger(rows)
    for line in answer:  # last on the terminal, where the eye lands when the run ends
        console.print(line.replace("**", ""), highlight=False, markup=False)
    console.print(f"[bold]operating point[/]: {context}", highlight=False)
    console.print(f"[bold]best vs best[/]: {comparison}", highlight=False)
    for text in words.values():
        console.print(f"[bold]map[/]: {text}", highlight=False)
    console.print(f"  reproduce took {wall} s wall, {cpu_seconds()} CPU s (load average {os.getloadavg()[0]:.1f})")
