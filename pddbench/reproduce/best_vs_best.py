"""Best split against best split at an equal chip budget, and the equal-prefill control (issue 14.3).

A fixed split decides a comparison, so reproduce searches each deployment's best instance split
(pddbench/sweep/checked_search.py, optimize's candidates and format, on reproduce's own executor) at the article's chip
counts: same-DC PD 88 chip A, PDD 43 chip A + 32 chip B (the article's near-equal budget: -5.3 %
hardware cost at the assumed prices). The search runs on seed 0; the best splits are then measured
on every seed (a capacity search and a run at base load).

The control is PDD's best split with its prefill pool replaced by same-DC PD's best prefill pool:
the same prefill chips as the baseline, relay and MD unchanged. PDD's best against the baseline
mixes two effects, a different number of prefill chips and PDD itself; the control against the
baseline keeps only the second, and PDD's best against the control only the first. The control
may use more or fewer chip A than PDD's budget; its row says how many."""

from __future__ import annotations

from typing import Callable

from pddbench.measure.capacity import MIN_REQUESTS
from pddbench.reproduce.claim_rows import change, row, unsteady, unsteady_reason
from pddbench.reproduce.ledger import Row
from pddbench.sweep.optimize import chips_used, label
from pddbench.schema.scenario import Scenario
from pddbench.sweep.executors import Executor

BUDGETS = {"same-dc-pd": {"A": 88}, "pdd": {"A": 43, "B": 32}}
# The measured deployments: name -> the paper scenario whose pools the split replaces.
MEASURED = {"best-same-dc-pd": "same-dc-pd", "best-pdd": "pdd", "control-pdd": "pdd"}
# Light and full alike: every candidate of one size measured on the steady trace, nothing pruned
# (the best by a capacity search, the others by one simulation where it first failed:
# pddbench/sweep/checked_search.py).
# Full once tried sizes 7/8/9 pre-selected on 1,000 requests: short-trace evidence that left its
# best-split rows inconclusive (ranking_reason) where light had a verdict, so the two modes
# disagreed (issue 27.1). Other sizes: the full run's sizes check (sizes_check.py).
PLAN = {"sizes": [8], "coarse_requests": None, "refine_top": 3}


def search(scenarios: dict[str, Scenario], executor: Executor, iterations: int,
           on_stage: Callable[[str], None] | None = None) -> dict[str, dict]:
    """Each deployment's best split in `scenarios` (paper name -> seed-0 scenario) at BUDGETS:
    every candidate measured, the best by a capacity search and the others by a check where the
    best first failed (pddbench/sweep/checked_search.py: the exhaustive search's answer)."""
    from pddbench.sweep.checked_search import optimize_checked

    out = {}
    for name, sc in scenarios.items():
        n = sc.workload.synth.requests if sc.workload.synth else None
        out[name] = optimize_checked(sc, BUDGETS[name], PLAN["sizes"], executor, iterations, n, on_stage)
    return out


def prefill_chips(split: dict) -> int:
    return split["prefill"]["instances"] * split["prefill"]["chips_per_instance"]


def control_split(pdd_split: dict, same_split: dict) -> dict:
    """PDD's split with the baseline's prefill pool (instances and chips per instance)."""
    return {r: dict(same_split["prefill"] if r == "prefill" else v) for r, v in pdd_split.items()}


def measured(best: dict[str, dict], scenarios: dict[str, Scenario]) -> dict[str, dict]:
    """The measured deployments (MEASURED): each best and the control, with split, chips and label."""
    same, pdd = best["same-dc-pd"]["best"]["split"], best["pdd"]["best"]["split"]
    sp = {"best-same-dc-pd": same, "best-pdd": pdd, "control-pdd": control_split(pdd, same)}
    out = {}
    for n, split in sp.items():
        chips = chips_used(scenarios[MEASURED[n]], split)
        out[n] = {"split": split, "chips": chips,
                  "label": f"{label(split)} ({', '.join(f'{k} {v}' for k, v in chips.items())})"}
    return out


def search_note(best: dict[str, dict]) -> str:
    """How the splits were found, for the rows' 'depends on' text."""
    parts = []
    for name, res in best.items():
        s = res["search"]
        how = f"{s['candidates']} maximal splits of {'/'.join(map(str, res['sizes']))}-chip instances"
        how += (f", coarse on {s['coarse_requests']:,} requests then the top {s['refined']} on {s['requests']:,}"
                if s["coarse_requests"] else f" on {s['requests']:,} requests")
        if s.get("checked") is not None:
            how += f" ({s['searched']} searched, {s['checked']} checks)"
        parts.append(f"{name} at {','.join(f'{k}={v}' for k, v in res['budget'].items())}: {how}, best "
                     f"{res['best']['label']} (shipped {res['scenario_split']})")
    return "Split search (seed 0): " + "; ".join(parts) + "."


def _rps(caps: list[dict]) -> str:
    return ", ".join(f"{c['throughput_within_sla_rps']:.1f} ({c.get('bound_by')})" for c in caps)


def ranking_reason(best: dict[str, dict]) -> str:
    """Why the best splits are not steady-state evidence ("" when they are): optimize ranked the
    splits on a trace shorter than the capacity search's min_requests, where a decode-bound split
    looks stronger than it is, so the split called best may not be."""
    short = {n: r["search"]["requests"] for n, r in best.items() if (r["search"]["requests"] or 0) < MIN_REQUESTS}
    if short:
        n = min(short.values())
        return (f"the splits were ranked on {n:,}-request traces, fewer than the {MIN_REQUESTS:,} the capacity "
                f"search needs, so the split called best may not be; settle it with `pddbench reproduce --requests "
                f"{MIN_REQUESTS}`.")
    coarse = {n: r["search"] for n, r in best.items() if r["search"].get("coarse_requests")}
    if coarse:
        s = next(iter(coarse.values()))
        return (f"the candidates were pre-selected on {s['coarse_requests']:,}-request traces (the top "
                f"{s['refine_top']} of {s['candidates']} measured on {s['requests']:,}), short-trace evidence that "
                "can drop the best split; settle it with `pddbench optimize` on every candidate at "
                f"{MIN_REQUESTS:,} requests (no --coarse-requests).")
    return ""


def measure_rows(s: dict, cap: dict, best: dict[str, dict], plan: dict[str, dict],
                 conv: dict[str, dict] | None = None) -> list[Row]:
    """The best-vs-best and control rows; `s` and `cap` hold per-seed summaries and capacity
    results under the MEASURED names, `plan` is `measured(...)`, `conv` the convergence checks by
    measured name (pddbench/reproduce/claim_rows.py)."""
    base, pdd, ctl = "best-same-dc-pd", "best-pdd", "control-pdd"
    ttft = lambda a, b: [change(x["ttft_ms"]["mean"], y["ttft_ms"]["mean"]) for x, y in zip(s[a], s[b])]
    thr = lambda a, b: [change(x["throughput_within_sla_rps"], y["throughput_within_sla_rps"])
                        for x, y in zip(cap[a], cap[b])]
    sp = {n: p["split"] for n, p in plan.items()}
    lab = {n: p["label"] for n, p in plan.items()}
    note = search_note(best) + (" One instance size (8 chips), every split measured on the steady trace (the "
                                "best by a capacity search, each other by a simulation where the best's search first "
                                "failed: failing there it cannot be better); other "
                                "sizes: the report's 'Other instance sizes' (`reproduce --full`), or `pddbench "
                                "optimize --prune --rank pools --sizes 4-16`.")
    short = [c for n in (base, pdd, ctl) for c in cap[n] if c.get("warnings")]
    warn = (f" The capacity search warns: {short[0]['requests']:,} requests are fewer than its min_requests "
            f"{short[0].get('min_requests') or MIN_REQUESTS:,}, so a decode-bound split's capacity may be overstated."
            if short else "")
    caps = f" Capacity req/s (bound by): same-DC {_rps(cap[base])}; PDD {_rps(cap[pdd])}." + warn
    pre = {n: prefill_chips(sp[n]) for n in sp}
    same_pre = ("PDD's best already has the baseline's prefill chips, so the control is PDD's best."
                if sp[ctl] == sp[pdd] else f"PDD's best has {pre[pdd]} prefill chips, the baseline's best {pre[base]}.")
    prefill_effect = [change(c["throughput_within_sla_rps"], p["throughput_within_sla_rps"])
                      for c, p in zip(cap[ctl], cap[pdd])]
    pe = [v for v in prefill_effect if v is not None]
    ctl_note = (f"Control {lab[ctl]} vs same-DC {lab[base]}: {same_pre} Control capacity {_rps(cap[ctl])} req/s; "
                + (f"control vs PDD's best (the prefill chips' own effect): {sum(pe) / len(pe):+.1f} % throughput."
                   if pe else ""))
    conv = conv or {}
    ranked = ranking_reason(best)
    why_best = unsteady_reason(cap[base] + cap[pdd], [conv.get(base), conv.get(pdd)]) or ranked
    why_ctl = unsteady_reason(cap[base] + cap[ctl], [conv.get(base), conv.get(ctl)]) or ranked
    return [row("ttft_change_best", ttft(pdd, base), f"PDD {lab[pdd]} vs same-DC {lab[base]}. " + note),
            *unsteady([row("throughput_change_best", thr(pdd, base), f"PDD {lab[pdd]} vs same-DC {lab[base]}." + caps
                           + " " + note)], why_best),
            row("ttft_change_equal_prefill", ttft(ctl, base), ctl_note),
            *unsteady([row("throughput_change_equal_prefill", thr(ctl, base), ctl_note + warn)], why_ctl)]
