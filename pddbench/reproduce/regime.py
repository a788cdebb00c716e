"""The regime load of the naive cross-DC rows, chosen from measured capacities, never from the
article's numbers (issue 14, point 5).

The article's naive cross-DC figures (P50 4.2 -> 6.7 s, P90 18.3 s, P99 29.7 s) come from a busy
production service. A load past the cross-DC line's capacity (the hand-picked 22 req/s this
replaces) makes cross-DC TTFT a growing queue (P50 ~690 s) that no service would run at. The rule,
fixed before measuring: the article says a good token service keeps total latency under ~30 s,
so each deployment's capacity here is its throughput within that service bound (P90 TTFT <= 30 s,
the scenario's TPOT bound, the steady-state search of pddbench/measure/capacity.py on the regime's own
1,500-request trace, every seed), and the regime load is 0.9 x the smallest of same-DC PD's and
naive cross-DC PD's capacities over the seeds: a busy load at which neither is unstable.

A finite trace can end before an overloaded line's backlog breaks the P90 bound (the search warns
below 12,000 requests), so the WAN line's own capacity is a third bound: its rate over the KV
bytes cross-DC PD shipped per request at its capacity probe (a load above it grows the line's
queue without end, whatever the trace length). The runs
offer it by scaling each seed's trace (the rate scale), as the capacity search did: the generator's
own rate would make another trace (its think times do not scale)."""

from __future__ import annotations

SERVICE_BOUND_MS = 30_000  # the article: "a good token service keeps total latency under ~30 s"
FRACTION = 0.9
MEASURED = ("regime-same-dc-pd", "regime-cross-dc-pd")  # the pair the naive cross-DC rows compare


def capacity_overrides() -> list[str]:
    """What the regime's capacity search changes in the regime scenarios: the service bound."""
    return [f"sla.ttft_ms={SERVICE_BOUND_MS}"]


def line_capacity_rps(summary: dict, rate_gbps: float | None) -> float | None:
    """The requests per second a WAN line of `rate_gbps` carries at the KV bytes per request of
    `summary` (a cross-DC run); None when the line is unlimited or nothing crossed it."""
    per_request = summary["wan_kv_bytes"] / summary["requests_total"] if summary.get("requests_total") else 0
    return rate_gbps * 1e9 / 8 / per_request if rate_gbps and per_request else None


def choose(caps: dict[str, list[dict]], line_rps: list[float | None] = ()) -> dict:
    """The regime load from each deployment's capacity results (one per seed) and the WAN line's
    capacity per seed: FRACTION of the smallest, so that no seed of either deployment, nor the
    line, runs past its capacity."""
    per = {n: [c["throughput_within_sla_rps"] for c in caps[n]] for n in MEASURED}
    line = [v for v in line_rps if v]
    if line:
        per["the WAN line"] = line
    smaller = min(per, key=lambda n: min(per[n]))
    load = FRACTION * min(per[smaller])
    bound = ("line rate / KV bytes per request" if smaller == "the WAN line" else
             "bound by " + "/".join(sorted({c.get("bound_by") or "none" for c in caps[smaller]})))
    warn = [c["warnings"][0] for n in MEASURED for c in caps[n] if c.get("warnings")]
    text = (f"regime load {load:.2f} req/s = {FRACTION:g} x the smallest capacity, {min(per[smaller]):.2f} req/s "
            f"({smaller}, {bound}), of same-DC and cross-DC PD within a {SERVICE_BOUND_MS / 1000:g} s P90 TTFT "
            f"service bound (the article's ~30 s) and of the WAN line; per seed: "
            + "; ".join(f"{n} {', '.join(f'{v:.2f}' for v in per[n])}" for n in per)
            + " req/s; chosen so that neither deployment nor the line runs past its capacity on any seed"
            + (f" (the capacity search warns: {warn[0]})" if warn else ""))
    return {"load_rps": round(load, 4), "fraction": FRACTION, "service_bound_ms": SERVICE_BOUND_MS,
            "capacities_rps": per, "smaller": smaller, "text": text}


# ---------------------------------------------------------------- the load ladder
# The regime load above is bound by whatever saturates first (so far: the WAN line), and there
# same-DC PD's median TTFT is service time. The ladder asks the article's question directly: does
# any stable load give same-DC PD a median TTFT of seconds, and what does cross-DC PD add there?
# Both deployments run at fractions of same-DC PD's own regime capacity (the smallest over seeds);
# cross-DC PD gets enough WAN lines that the top rung keeps its line at most LINE_UTILISATION busy
# (the article's service ran cross-DC PD without a runaway line queue), so its inflation is latency
# and transfer time, not the line's backlog. Fractions above 1 show what happens past capacity.
LADDER = (0.5, 0.7, 0.9, 1.0, 1.2)
LINE_UTILISATION = 0.9
MAX_LINES = 1024  # the scenario schema's bound on network.wan_lines
SECONDS_S = 1.0  # "seconds" of same-DC median TTFT: the regime the article's 4.2 s stands for


def ladder_plan(same_caps: list[dict], line_rps: list[float | None], lines_now: int) -> dict:
    """The ladder's loads (fractions of same-DC PD's smallest regime capacity) and the WAN lines
    cross-DC PD gets so that the top rung's KV keeps them at most LINE_UTILISATION busy.
    `line_rps`: per seed, the capacity of the scenario's `lines_now` lines (line_capacity_rps)."""
    import math

    cap = min(c["throughput_within_sla_rps"] for c in same_caps)
    loads = [round(f * cap, 4) for f in LADDER]
    per_line = [v / lines_now for v in line_rps if v]
    need = math.ceil(loads[-1] / (LINE_UTILISATION * min(per_line))) if per_line and cap > 0 else lines_now
    lines = min(MAX_LINES, max(lines_now, need))
    return {"fractions": list(LADDER), "capacity_rps": round(cap, 4), "loads_rps": loads, "wan_lines": lines,
            "wan_lines_capped": need > MAX_LINES,
            "line_capacity_rps_per_line": [round(v, 4) for v in per_line], "line_utilisation": LINE_UTILISATION}


def ladder_table(same: list[list[dict]], cross: list[list[dict]], plan: dict) -> list[dict]:
    """One row per rung: the load, each deployment's TTFT p50/p90/p99 (s, mean over seeds) and the
    P50 inflation per seed. `same[i]`/`cross[i]`: rung i's summaries, one per seed."""
    mean = lambda xs: sum(xs) / len(xs)
    rows = []
    for i, (f, load) in enumerate(zip(plan["fractions"], plan["loads_rps"])):
        row = {"fraction": f, "load_rps": load, "past_capacity": f > 1.0}
        for who, runs in (("same_dc", same[i]), ("cross_dc", cross[i])):
            for p in ("p50", "p90", "p99"):
                row[f"{who}_{p}_s"] = round(mean([r["ttft_ms"][p] / 1000 for r in runs]), 4)
        row["p50_inflation_s"] = [round((c["ttft_ms"]["p50"] - s["ttft_ms"]["p50"]) / 1000, 4)
                                  for s, c in zip(same[i], cross[i])]
        row["same_dc_p50_s_per_seed"] = [round(r["ttft_ms"]["p50"] / 1000, 4) for r in same[i]]
        rows.append(row)
    return rows


def seconds_rung(table: list[dict]) -> dict | None:
    """The lightest stable rung (fraction <= 1) whose same-DC P50 TTFT is seconds on every seed."""
    return next((r for r in table if not r["past_capacity"] and min(r["same_dc_p50_s_per_seed"]) >= SECONDS_S), None)


def ladder_words(table: list[dict], plan: dict) -> str:
    """What the ladder says, generated from it: where same-DC PD's median reaches seconds, and the
    naive cross-DC inflation there."""
    if not table:
        return "No load ladder: same-DC PD's regime capacity was 0."
    rungs = "; ".join(f"{r['fraction']:g} ({r['load_rps']:.2f} req/s{', past capacity' if r['past_capacity'] else ''}): "
                      f"same-DC {r['same_dc_p50_s']:.2f} / {r['same_dc_p90_s']:.2f} / {r['same_dc_p99_s']:.2f} -> "
                      f"cross-DC {r['cross_dc_p50_s']:.2f} / {r['cross_dc_p90_s']:.2f} / {r['cross_dc_p99_s']:.2f}"
                      for r in table)
    text = (f"Load ladder (fractions of same-DC PD's regime capacity {plan['capacity_rps']:.2f} req/s, the smallest "
            f"over seeds; cross-DC PD on {plan['wan_lines']} WAN line(s), "
            + ("capped: the top rung needs more, so the line can still bind" if plan.get("wan_lines_capped") else
               f"enough for the top rung at {plan['line_utilisation']:g} of their rate")
            + f"), TTFT p50 / p90 / p99 in s, mean over seeds: {rungs}.")
    hit = seconds_rung(table)
    stable = [r for r in table if not r["past_capacity"]]
    if hit:
        infl = hit["p50_inflation_s"]
        text += (f" Same-DC PD's median TTFT first reaches seconds at {hit['fraction']:g} x its capacity; there naive "
                 f"cross-DC PD adds {min(infl):.2f} .. {max(infl):.2f} s at the median.")
    elif stable:
        top = max(stable, key=lambda r: r["same_dc_p50_s"])
        text += (f" At no stable load does same-DC PD's median TTFT reach {SECONDS_S:g} s (at most {top['same_dc_p50_s']:.2f} s, "
                 f"at {top['fraction']:g} x capacity): under these assumptions the article's seconds-scale same-DC median "
                 "needs a load past capacity (a growing queue) or prefills far slower than the assumed chips'.")
    return text
