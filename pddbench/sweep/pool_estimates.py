"""Measured per-pool capacities, the ranking of `optimize --prune --rank pools` (issue 27.3).

The analytic bounds (split_bounds.py) are valid but about twice the simulator's capacity on the
paper's trace (ideal cache, no queue), so across sizes 4-16 they prune little. Here each role's
capacity per instance size is measured on the simulator itself, on the same steady trace: the role
at a reference count n0 with every other role ample (instances for twice its chip kind's whole
budget), one capacity search each. A split's estimate is the smallest, over its roles, of
instances x (that capacity / n0): the pool that runs out first.

An estimate, not a bound: a larger pool queues less, so capacity per instance grows with the count
(measured on 12,000 requests: 2.73, 3.04 and 3.13 req/s per 8-chip prefill instance at 3, 6 and 9
instances). The search therefore widens its pruning margin by the largest underestimate it has
seen among the splits it simulated, and the valid analytic bound still applies to every split."""

from __future__ import annotations

import math
from typing import Callable

from pddbench.schema.scenario import ROLES_OF_KIND, Scenario

AMPLE_BUDGETS = 2  # another role is ample with instances for this many times its chip kind's budget


def reference_count(sc: Scenario, role: str, size: int, budget: dict[str, int]) -> int:
    """n0: the instances of `size` that hold the role's share of its chip budget in the scenario's
    own split (so the measured per-instance capacity is near the counts the search tries)."""
    pools = {r: getattr(sc.deployment, r) for r in ROLES_OF_KIND[sc.deployment.kind]}
    chip = pools[role].chip
    same_chip = [p for p in pools.values() if p.chip == chip]
    share = pools[role].instances * pools[role].chips_per_instance / sum(p.instances * p.chips_per_instance
                                                                        for p in same_chip)
    most = max(1, (budget[chip] - sum(p.chips_per_instance for p in same_chip if p is not pools[role])) // size)
    return max(1, min(most, round(share * budget[chip] / size)))


def ample_split(sc: Scenario, role: str, size: int, count: int, budget: dict[str, int]) -> dict:
    """The split that measures `role` alone: it at `count` x `size`, every other role ample."""
    out = {}
    for r in ROLES_OF_KIND[sc.deployment.kind]:
        pool = getattr(sc.deployment, r)
        if r == role:
            out[r] = {"instances": count, "chips_per_instance": size}
        else:
            n = math.ceil(AMPLE_BUDGETS * budget[pool.chip] / pool.chips_per_instance)
            out[r] = {"instances": n, "chips_per_instance": pool.chips_per_instance}
    return out


def measure_pools(sc: Scenario, budget: dict[str, int], fits: dict[str, list[int]], measure: Callable,
                  on_stage: Callable[[str], None] | None = None) -> dict[str, dict[int, dict]]:
    """role -> size -> {instances, capacity_rps, per_instance_rps, bound_by}; `measure` maps a list
    of splits to their capacity results (optimize's executor-backed measure)."""
    keys = [(r, s) for r in ROLES_OF_KIND[sc.deployment.kind] for s in fits[r]]
    counts = {k: reference_count(sc, k[0], k[1], budget) for k in keys}
    on_stage and on_stage(f"pool stage: {len(keys)} capacity searches (each role alone, the others ample)")
    caps = measure([ample_split(sc, r, s, counts[(r, s)], budget) for r, s in keys])
    out: dict[str, dict[int, dict]] = {}
    for (r, s), cap in zip(keys, caps):
        rps = cap["throughput_within_sla_rps"]
        out.setdefault(r, {})[s] = {"instances": counts[(r, s)], "capacity_rps": rps,
                                    "per_instance_rps": rps / counts[(r, s)], "bound_by": cap.get("bound_by")}
    return out


def estimate(split: dict, pools: dict[str, dict[int, dict]]) -> dict:
    """{rps, limit}: the split's estimated capacity and the role that sets it; rps None when a role
    measured 0 at its reference count (then nothing is estimated: the analytic bound decides)."""
    rates = {}
    for r, v in split.items():
        per = pools[r][v["chips_per_instance"]]["per_instance_rps"]
        if per <= 0:
            return {"rps": None, "limit": f"{r} measured 0 req/s at {pools[r][v['chips_per_instance']]['instances']} "
                                          f"x {v['chips_per_instance']}"}
        rates[r] = v["instances"] * per
    limit = min(rates, key=rates.get)
    return {"rps": round(rates[limit], 6), "limit": limit}
