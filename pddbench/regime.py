"""The regime load of the naive cross-DC rows, chosen from measured capacities, never from the
article's numbers (issue 14, point 5).

The article's naive cross-DC figures (P50 4.2 -> 6.7 s, P90 18.3 s, P99 29.7 s) come from a busy
production service. A load past the cross-DC line's capacity (the hand-picked 22 req/s this
replaces) makes cross-DC TTFT a growing queue (P50 ~690 s) that no service would run at. The rule,
fixed before measuring: the article says a good token service keeps total latency under ~30 s,
so each deployment's capacity here is its throughput within that service bound (P90 TTFT <= 30 s,
the scenario's TPOT bound, the steady-state search of pddbench/capacity.py on the regime's own
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
