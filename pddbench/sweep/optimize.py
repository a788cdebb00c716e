"""`pddbench optimize`: a deployment's best instance split at an equal chip budget.

A fixed split decides comparisons (the baseline's best split was 21% above the one first
shipped), so deployments are compared best against best. Candidates keep each pool's chip and
vary its instance count and chips per instance (from `sizes`), per chip kind within that kind's
budget (same_dc_pd / cross_dc_pd: P and D; pdd: P and RLD on chip A, MD on chip B).

Search: only maximal splits are tried (no pool could take one more instance of its size within
the budget): an extra instance never lowers capacity, and this keeps the grid to ~budget/size
candidates per pool pair. Each candidate's capacity is a whole `capacity` task on the sweep
engine's executor (the same search as `pddbench capacity`, steady-state criterion). With
`coarse_requests`, every candidate is first measured on that many leading requests and only the
`refine_top` best are measured on the full trace; the best is chosen among the full measurements.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable

from pddbench.core.errors import UserError
from pddbench.core.limits import (DEFAULT_REQUESTS, MAX_OPTIMIZE_SIZES, MAX_OPTIMIZE_SPLITS, MAX_WORK_HOURS,
                             SIM_S_PER_REQUEST,
                             capacity_probes, check_size, check_work, duration, nominal_requests)
from pddbench.schema.scenario import ROLES_OF_KIND, Scenario
from pddbench.sweep.executors import Executor, results_in_order
from pddbench.sweep.payload import make_payload, ship_scenario

MAX_CANDIDATES = MAX_OPTIMIZE_SPLITS  # the default; `optimize --max-splits` raises it
MAX_CHIPS_PER_INSTANCE = 4096  # the scenario's own bound on deployment.<pool>.chips_per_instance
SHORT = {"prefill": "P", "decode": "D", "relay": "RLD", "main": "MD", "remote_prefill": "PR"}


def parse_sizes(text: str) -> list[int]:
    """--sizes '7,8' -> [7, 8]: whole numbers of chips per instance within the scenario's bound,
    at most MAX_OPTIMIZE_SIZES distinct (each size multiplies the splits to count)."""
    parts = [x.strip() for x in text.split(",") if x.strip()]
    try:
        sizes = []
        for x in parts:
            lo, _, hi = x.partition("-")
            if hi and int(hi) - int(lo) > MAX_OPTIMIZE_SIZES:  # a range is counted before it is built
                raise UserError(f"--sizes {text}: the range {x} gives {int(hi) - int(lo) + 1} sizes, more than the limit "
                                f"of {MAX_OPTIMIZE_SIZES}")
            sizes += list(range(int(lo), int(hi) + 1)) if hi else [int(x)]
    except ValueError:
        raise UserError(f"--sizes {text}: expected whole numbers or ranges, e.g. 7,8 or 4-16") from None
    for x in parts:
        lo, _, hi = x.partition("-")
        if hi and int(hi) < int(lo):
            raise UserError(f"--sizes {text}: the range {x} runs backwards; write it low to high, e.g. {hi}-{lo}")
    if not sizes or min(sizes) < 1:
        raise UserError(f"--sizes {text}: expected chips per instance of at least 1, e.g. 7,8 or 4-16")
    if max(sizes) > MAX_CHIPS_PER_INSTANCE:
        raise UserError(f"--sizes {text}: {max(sizes)} chips per instance is more than a pool allows "
                        f"({MAX_CHIPS_PER_INSTANCE})")
    check_size("--sizes gives", len(set(sizes)), MAX_OPTIMIZE_SIZES, None, None, unit=" distinct sizes")
    return sizes


def parse_budget(text: str, sc: Scenario) -> dict[str, int]:
    """'A=43,B=32' -> {A: 43, B: 32}; a bare number is the budget of the one chip kind the pools use.
    Each chip the pools use once, with a whole number of at least 1; a chip named twice or not used
    by the scenario's pools is refused, naming it."""
    chips = {p.chip for p in sc.deployment.pools().values() if p is not None}
    if not chips:
        raise UserError(f"--budget {text}: the scenario's deployment ({sc.deployment.kind}) states no pools with "
                        "chips to split; give a simulated scenario (runtime: sim) whose pools name their chip")
    out: dict[str, int] = {}
    parts = [x.strip() for x in text.split(",") if x.strip()]
    if not parts:
        raise UserError(f"--budget {text!r}: give chips per chip kind, e.g. " + ",".join(f"{c}=88" for c in sorted(chips)))
    for part in parts:
        name, eq, num = part.partition("=")
        if not eq:
            if len(chips) != 1:
                raise UserError(f"--budget {text}: the pools use chips {sorted(chips)}; give one budget each, e.g. "
                                + ",".join(f"{c}=N" for c in sorted(chips)))
            name, num = next(iter(chips)), part
        name = name.strip()
        if not name:
            raise UserError(f"--budget {text}: '{part}' names no chip (write CHIP=N, e.g. A=88)")
        if name not in chips:
            raise UserError(f"--budget {text}: chip {name} is not used by the scenario's pools (they use "
                            f"{', '.join(sorted(chips))})")
        if name in out:
            raise UserError(f"--budget {text}: chip {name} is given twice; give each chip's budget once")
        try:
            out[name] = int(num.strip())
        except ValueError:
            raise UserError(f"--budget {text}: '{num.strip()}' is not a whole number of chips") from None
        if out[name] < 1:
            raise UserError(f"--budget {text}: chip {name} needs a budget of at least 1 chip, not {out[name]}")
    missing = chips - set(out)
    if missing:
        raise UserError(f"--budget {text}: no budget for chip(s) {sorted(missing)} the deployment uses")
    return out


# -- counting splits arithmetically ------------------------------------------------------------
# A split of one chip kind's budget B over roles with sizes s_1..s_k is maximal when each role has
# n_i >= 1 instances, sum(n_i * s_i) <= B and the chips left are fewer than min(s): no role could
# take one more instance. Then the last role takes all it can (n_k = rest // s_k), so a split is
# fixed by n_1..n_{k-1}. Counting never lists splits: a budget of 10**9 chips is counted in
# microseconds, and enumeration only starts once the count is within the limit.

def _floor_sum(n: int, m: int, a: int, b: int) -> int:
    """sum(floor((a*i + b) / m) for i in range(n)), for a, b >= 0, m >= 1 (the classic O(log) sum)."""
    total = 0
    while n > 0:
        if a >= m:
            total += (n * (n - 1) // 2) * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        y_max = a * n + b
        if y_max < m:
            break
        n, b, m, a = y_max // m, y_max % m, a, m
    return total


def _count_two(rest: int, s1: int, s2: int, m: int) -> int:
    """Maximal splits of `rest` chips over two roles of sizes s1, s2 (m = the smallest size of the
    whole split): n1 in [1, N] with (rest - n1*s1) mod s2 < m, N = (rest - s2) // s1."""
    n = (rest - s2) // s1
    if n < 1:
        return 0
    # [x mod s2 < m] = floor(x / s2) - floor((x - m) / s2) for 0 < m <= s2; x = rest - n1*s1, taken
    # in reverse (i = N - n1) and lifted by a multiple of s2 so every term is >= 0 (it cancels).
    low = rest - n * s1  # x at n1 = N
    lift = s2 * (-(-(m - low) // s2) if m > low else 0)
    base = low + lift
    return _floor_sum(n, s2, s1, base) - _floor_sum(n, s2, s1, base - m)


def _count_group(sizes: tuple[int, ...], rest: int, m: int, cap: int) -> int:
    """Maximal splits of `rest` chips over roles of these sizes; stops counting past `cap`."""
    if len(sizes) == 1:
        n = rest // sizes[0]
        return int(n >= 1 and rest - n * sizes[0] < m)
    if len(sizes) == 2:
        return _count_two(rest, sizes[0], sizes[1], m)
    total, need = 0, sum(sizes[1:])
    for n1 in range(1, (rest - need) // sizes[0] + 1):
        total += _count_group(sizes[1:], rest - n1 * sizes[0], m, cap - total)
        if total > cap:
            break
    return total


def _groups(sc: Scenario) -> list[tuple[str, list[str]]]:
    roles = ROLES_OF_KIND[sc.deployment.kind]
    by_chip: dict[str, list[str]] = {}
    for r in roles:
        by_chip.setdefault(getattr(sc.deployment, r).chip, []).append(r)
    return sorted(by_chip.items())


OPTIMIZE_NAMES = {"budget": "--budget", "sizes": "--sizes",
                  "raise": "give --max-splits N (or fewer --sizes, a smaller budget)"}  # what optimize's user typed


def sizes_that_fit(sc: Scenario, sizes: list[int], sizes_name: str = "--sizes") -> dict[str, list[int]]:
    """Per role, the instance sizes whose memory holds the model's weights (a smaller instance
    cannot run at all, so it is no candidate); refused when none of `sizes` does for a role."""
    from pddbench.sim.cluster import kv_capacity_tokens

    out = {}
    for role in ROLES_OF_KIND[sc.deployment.kind]:
        pool = getattr(sc.deployment, role)
        fit = []
        for size in sorted(set(sizes)):
            try:
                kv_capacity_tokens(sc, pool.model_copy(update={"chips_per_instance": size}), role)
            except UserError:
                continue
            fit.append(size)
        if not fit:
            chip = sc.chips[pool.chip]
            need = sc.model.params_total_b * sc.model.weight_bytes_per_param / (chip.memory_gb * pool.kv_memory_fraction)
            raise UserError(f"no size in {sizes_name} {','.join(map(str, sorted(set(sizes))))} holds the model's weights on "
                            f"deployment.{role} ({pool.chip}, {chip.memory_gb:g} GB each): give a size above "
                            f"{need:.1f} chips per instance")
        out[role] = fit
    return out


def count_splits(sc: Scenario, budget: dict[str, int], sizes: list[int], cap: int,
                 sizes_name: str = "--sizes") -> tuple[int, bool]:
    """The number of candidate splits (the product over chip kinds of each kind's maximal splits),
    counted arithmetically, and whether it is exact: three or more roles on one chip kind are
    counted only until they pass `cap` (then the number is a lower bound, already past it)."""
    fits = sizes_that_fit(sc, sizes, sizes_name)
    total, exact = 1, True
    for chip, roles in _groups(sc):
        group = 0
        for sz in itertools.product(*(fits[r] for r in roles)):
            if sum(sz) <= budget[chip]:
                group += _count_group(sz, budget[chip], min(sz), cap - group)
            if len(roles) > 2 and group > cap:  # one and two roles count exactly in O(size)
                exact = False
                break
        total *= group
    return total, exact


def _last_two(left: int, s_a: int, s_b: int, m: int) -> list[tuple[int, int]]:
    """Maximal (n_a, n_b) for the last two roles, by increasing n_a. The valid n_a repeat with
    period s_b / gcd(s_a, s_b), so only one period is tested and the rest stepped over."""
    n_max = (left - s_b) // s_a
    if n_max < 1:
        return []
    period = s_b // math.gcd(s_a, s_b)
    starts = [n for n in range(1, min(n_max, period) + 1) if (left - n * s_a) % s_b < m]
    return [(n, (left - n * s_a) // s_b) for n in sorted(n for n0 in starts for n in range(n0, n_max + 1, period))]


def _group(roles: list[str], budget: int, fits: dict[str, list[int]]) -> list[dict]:
    """Maximal splits of one chip kind's budget over `roles`: each role >= 1 instance of a size in
    `fits[role]`, total <= budget, and no role could take one more instance. Called once the count
    is within the limit; the last role's count is computed, not searched."""
    out = []
    for sz in itertools.product(*(fits[r] for r in roles)):
        if sum(sz) > budget:
            continue
        m = min(sz)

        def counts(i: int, left: int):
            if i == len(roles) - 1:
                n = left // sz[i]
                if n >= 1 and left - n * sz[i] < m:
                    yield (n,)
                return
            if i == len(roles) - 2:
                yield from _last_two(left, sz[i], sz[i + 1], m)
                return
            for n in range(1, (left - sum(sz[i + 1:])) // sz[i] + 1):
                for rest in counts(i + 1, left - n * sz[i]):
                    yield (n, *rest)
        for ns in counts(0, budget):
            out.append({r: {"instances": n, "chips_per_instance": s} for r, n, s in zip(roles, ns, sz)})
    return out


def check_split_count(sc: Scenario, budget: dict[str, int], sizes: list[int], max_splits: int = MAX_CANDIDATES,
                      per_split_s: float | None = None, work: str = "", names: dict | None = None) -> int:
    """The number of candidate splits, counted arithmetically; refused when none fits or when past
    `max_splits` (with the estimate `per_split_s` each, when given). `names`: what the user typed
    for the budget and sizes and how to raise the limit (optimize's options by default; a designs
    spec's fields and its own option there)."""
    names = names or OPTIMIZE_NAMES
    n, exact = count_splits(sc, budget, sizes, max_splits, names["sizes"])
    if n == 0:
        raise UserError(f"no split fits the budget {budget} with chips per instance {sizes} "
                        f"(every pool of {sc.deployment.kind} needs at least one instance)")
    check_size(f"{names['budget']} {','.join(f'{c}={b}' for c, b in sorted(budget.items()))} with {names['sizes']} "
               f"{','.join(map(str, sorted(set(sizes))))} gives{'' if exact else ' at least'}", n, max_splits,
               per_split_s, names["raise"], work, unit=" candidate splits")
    return n


def candidate_splits(sc: Scenario, budget: dict[str, int], sizes: list[int],
                     max_splits: int = MAX_CANDIDATES) -> list[dict]:
    """Every maximal split, in a fixed order (the product over chip kinds, sorted by name); their
    number is counted first and refused past `max_splits`."""
    check_split_count(sc, budget, sizes, max_splits)
    roles = ROLES_OF_KIND[sc.deployment.kind]
    fits = sizes_that_fit(sc, sizes)
    groups = [_group(rs, budget[c], fits) for c, rs in _groups(sc)]
    out = [{k: v for g in combo for k, v in g.items()} for combo in itertools.product(*groups)]
    return [{r: s[r] for r in roles} for s in out]


def label(split: dict) -> str:
    return " ".join(f"{SHORT[r]}{v['instances']}x{v['chips_per_instance']}" for r, v in split.items())


def chips_used(sc: Scenario, split: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for r, v in split.items():
        chip = getattr(sc.deployment, r).chip
        out[chip] = out.get(chip, 0) + v["instances"] * v["chips_per_instance"]
    return dict(sorted(out.items()))


def with_split(sc: Scenario, split: dict, max_requests: int | None = None) -> Scenario:
    trial = sc.model_copy(deep=True)
    for r, v in split.items():
        pool = getattr(trial.deployment, r)
        pool.instances, pool.chips_per_instance = v["instances"], v["chips_per_instance"]
    if max_requests:
        trial.workload.max_requests = max_requests
    return Scenario.model_validate(trial.model_dump())  # validated as a scenario file would be


def measure(scenarios: list[Scenario], executor: Executor, iterations: int,
            near: list[float | None] | None = None, stop_if_near_fails: bool = False,
            known: list[dict[float, dict]] | None = None) -> list[dict]:
    """Each scenario's capacity result, as `capacity` tasks (the sweep's capacity measure);
    `near`: per scenario, a warm start's rate scale or None (pddbench/measure/capacity.py), and
    with `stop_if_near_fails` a check there that ends the search where it fails; `known`: per
    scenario, summaries already simulated by rate scale, which its search reuses."""
    cache: dict = {}
    payloads = []
    for i, sc in enumerate(scenarios):
        data, blobs = ship_scenario(sc, cache)
        task = {"kind": "capacity", "scenario": data, "iterations": iterations}
        if near and near[i]:
            task["near"] = near[i]
            if stop_if_near_fails:
                task["stop_if_near_fails"] = True
        if known and known[i]:
            task["known"] = [[k, v] for k, v in known[i].items()]
        payloads.append(make_payload(task, blobs))
    return results_in_order(executor, payloads, "capacity", lambda _i: "capacity of a candidate")


def _brief(cap: dict) -> dict:
    keys = ("throughput_within_sla_rps", "rate_scale", "bcr", "cost_per_hour", "bound_by", "bound_by_all",
            "resolution_rate_scale",
            "requests", "steady_window", "warnings")
    return {k: cap.get(k) for k in keys}


def optimize(sc: Scenario, budget: dict[str, int], sizes: list[int], executor: Executor, iterations: int = 7,
             requests: int | None = None, coarse_requests: int | None = None, refine_top: int = 3,
             on_stage: Callable[[str], None] | None = None, max_splits: int = MAX_CANDIDATES) -> dict:
    """Measure the candidates (coarse first when asked) and return optimize.json's content."""
    splits = candidate_splits(sc, budget, sorted(set(sizes)), max_splits)
    rows = [{"label": label(s), "split": s, "chips": chips_used(sc, s), "coarse": None, "full": None} for s in splits]
    coarse = coarse_requests if coarse_requests and (requests is None or coarse_requests < requests) else None
    chosen = list(range(len(rows)))
    if coarse and len(rows) > refine_top:
        on_stage and on_stage(f"coarse: {len(rows)} splits on {coarse} requests")
        for row, cap in zip(rows, measure([with_split(sc, s, coarse) for s in splits], executor, iterations)):
            row["coarse"] = _brief(cap)
        # stable order: capacity descending, then candidate order
        chosen = sorted(chosen, key=lambda i: -rows[i]["coarse"]["throughput_within_sla_rps"])[:refine_top]
        chosen.sort()
    on_stage and on_stage(f"full: {len(chosen)} splits on the whole trace")
    for i, cap in zip(chosen, measure([with_split(sc, splits[i]) for i in chosen], executor, iterations)):
        rows[i]["full"] = _brief(cap)
    best_i = max(chosen, key=lambda i: (rows[i]["full"]["throughput_within_sla_rps"], -i))
    return _result(sc, budget, sizes, iterations, rows, best_i, {
        "splits": "maximal (no pool could take one more instance within its chip budget)",
        "candidates": len(rows), "requests": requests, "coarse_requests": coarse,
        "refined": len(chosen), "refine_top": refine_top if coarse else None})


def _result(sc: Scenario, budget: dict[str, int], sizes: list[int], iterations: int, rows: list[dict], best_i: int,
            search: dict) -> dict:
    """optimize.json's content."""
    best = rows[best_i]
    own = {r: {"instances": p.instances, "chips_per_instance": p.chips_per_instance}
           for r, p in sc.deployment.pools().items() if r in ROLES_OF_KIND[sc.deployment.kind]}
    return {
        "scenario": sc.name, "deployment": sc.deployment.kind, "budget": budget, "sizes": sorted(set(sizes)),
        "sla": sc.sla.model_dump(), "iterations": iterations, "search": search,
        "scenario_split": label(own),
        "candidates": rows,
        "best": {"label": best["label"], "split": best["split"], "chips": best["chips"], **best["full"]},
    }


PRUNE_BATCH = 4  # splits simulated per round of the pruned search (fixed: the result must not depend on -j)
MAX_ENUMERATED = 200_000  # splits the pruned search may enumerate and bound (arithmetic only, ~0.3 ms each)


def optimize_pruned(sc: Scenario, budget: dict[str, int], sizes: list[int], executor: Executor, iterations: int = 7,
                    requests: int | None = None, on_stage: Callable[[str], None] | None = None,
                    max_simulations: int = MAX_CANDIDATES, rank: str = "bound") -> dict:
    """Branch and bound (pddbench/sweep/split_bounds.py): every maximal split is bounded
    analytically, then simulated in order of its rank, PRUNE_BATCH at a time, until no split left
    could come within MARGIN of the best capacity simulated: those cannot win and are pruned.
    rank "bound" orders by the analytic bound; "pools" by measured pool capacities
    (pool_estimates.py), which also prune, their margin widened by the largest underestimate seen.
    Past `max_simulations` the rest stay unsettled and the result says the search is not exhaustive."""
    from pddbench.sweep import pool_estimates as pe
    from pddbench.sweep import split_bounds as sb

    splits = candidate_splits(sc, budget, sorted(set(sizes)), MAX_ENUMERATED)
    prof = sb.profile(sc)
    rows = [{"label": label(s), "split": s, "chips": chips_used(sc, s), "coarse": None, "full": None,
             "bound": sb.bound(sc, s, prof), "estimate": None, "status": None} for s in splits]
    pools = None
    if rank == "pools":
        meas = lambda trial: measure([with_split(sc, t) for t in trial], executor, iterations)
        pools = pe.measure_pools(sc, budget, sizes_that_fit(sc, sorted(set(sizes))), meas, on_stage)
        for r in rows:
            r["estimate"] = pe.estimate(r["split"], pools)
    under = 0.0  # the largest capacity / estimate - 1 among simulated splits (an estimate is no bound)

    def est(i: int) -> float | None:
        return rows[i]["estimate"]["rps"] if pools else None

    def rank_rps(i: int) -> float:
        """What orders the search: the estimate where there is one, else the bound."""
        return rows[i]["bound"]["bound_rps"] if est(i) is None else est(i)

    def reach(i: int) -> float:
        """The most split i could deliver by what is known now."""
        b = rows[i]["bound"]["bound_rps"]
        return b if est(i) is None else min(b, est(i) * (1 + under))

    order = sorted(range(len(rows)), key=lambda i: (-rank_rps(i), i))
    best, done = 0.0, []
    floor = lambda: (1 - sb.MARGIN) * best
    while len(done) < max_simulations:
        # every split not yet simulated, against today's best and margin (the margin only grows,
        # so a split left out one round may come back the next)
        simulated = set(done)
        left = [i for i in order if i not in simulated and reach(i) > 0 and reach(i) >= floor()]
        batch = left[:min(PRUNE_BATCH, max_simulations - len(done))]
        if not batch:
            break
        ranks = ", ".join(f"{rank_rps(i):.3g}" for i in batch)
        on_stage and on_stage(f"{'estimated' if pools else 'bounded'} search: simulating {len(batch)} splits "
                              f"({ranks} req/s; best so far {best:.3g})")
        for i, cap in zip(batch, measure([with_split(sc, splits[i]) for i in batch], executor, iterations)):
            rows[i]["full"], rows[i]["status"] = _brief(cap), "simulated"
            best = max(best, cap["throughput_within_sla_rps"])
            if est(i):
                under = max(under, cap["throughput_within_sla_rps"] / est(i) - 1)
        done += batch
    for i, r in enumerate(rows):
        if r["status"]:
            continue
        r["reach_rps"] = round(reach(i), 6)
        b = r["bound"]
        if b["bound_rps"] == 0:
            r["status"] = f"pruned: {b['limit']}" if "fit" in b["limit"] else f"pruned: {b['limit']} can meet no SLA"
        elif b["bound_rps"] < floor():
            r["status"] = f"pruned: bound {b['bound_rps']:.3g} req/s ({b['limit']}) < {1 - sb.MARGIN:g} x the best {best:.3g}"
        elif reach(i) < floor():
            r["status"] = (f"pruned: estimate {est(i):.3g} req/s ({r['estimate']['limit']}) x {1 + under:.3g} < "
                           f"{1 - sb.MARGIN:g} x the best {best:.3g}")
        else:
            r["status"] = f"unsettled: could reach {reach(i):.3g} req/s, above {1 - sb.MARGIN:g} x the best; not " \
                          f"simulated (--max-splits {max_simulations} simulations)"
    if not done:
        raise UserError(f"no split of the budget {budget} can meet the SLA by its analytic bound (every pool's weights "
                        "must fit and its decode step meet the TPOT bound)")
    best_i = max(done, key=lambda i: (rows[i]["full"]["throughput_within_sla_rps"], -i))
    unsettled = sum(r["status"].startswith("unsettled") for r in rows)
    # the most the best split could deliver by the search's own rules (all rows, not the listed ones)
    ceiling = max([rows[best_i]["full"]["throughput_within_sla_rps"]]
                  + [r["reach_rps"] for r in rows if r["status"].startswith("unsettled")])
    result = _result(sc, budget, sizes, iterations, rows, best_i, {
        "splits": "maximal, bounded analytically (pddbench/sweep/split_bounds.py)" + (
            ", estimated from measured pool capacities (pddbench/sweep/pool_estimates.py)" if pools else "")
        + f", simulated in order of {'estimate' if pools else 'bound'}",
        "rank": rank, "candidates": len(rows), "requests": requests, "coarse_requests": None, "refined": len(done),
        "refine_top": None, "pruned": sum(r["status"].startswith("pruned") for r in rows), "unsettled": unsettled,
        "exhaustive": unsettled == 0, "ceiling_rps": round(ceiling, 6), "margin": sb.MARGIN,
        "largest_underestimate": round(under, 6) if pools else None,
        "pool_capacities": pools, "simulations": len(done) + sum(len(v) for v in (pools or {}).values())})
    rest = sorted((r for r in rows if r["status"] != "simulated"),
                  key=lambda r: (not r["status"].startswith("unsettled"), -r["reach_rps"]))  # the open ones first
    result["candidates"] = [r for r in rows if r["status"] == "simulated"] + rest[:MAX_LISTED]
    return result


MAX_LISTED = 500  # optimize.json lists every simulated split and at most this many of the others


def run_optimize(scenario, overrides: list[str], budget: str, sizes: list[int], out, results, jobs: int = 1,
                 iterations: int = 7, coarse_requests: int | None = None, refine_top: int = 3,
                 on_stage: Callable[[str], None] | None = None, max_splits: int = MAX_CANDIDATES, prune: bool = False,
                 rank: str = "bound", max_hours: float = MAX_WORK_HOURS):
    """Write optimize.json and optimize.png into `out` or a new RESULTS/<name>-optimize/<run-id>/.
    The budget is parsed and its splits counted (refused past `max_splits`, with an estimate)
    before the workload is generated or any folder claimed."""
    from pddbench.measure.capacity import check_capacity_workload
    from pddbench.core.io import check_out_options, run_folder, write_json
    from pddbench.core.provenance import provenance
    from pddbench.report.optimize_figure import optimize_figure
    from pddbench.schema.scenario import load_scenario
    from pddbench.sweep.executors import make_executor
    from pddbench.workload.source import workload_requests

    check_out_options(out, results)
    sc = load_scenario(scenario, overrides)
    if sc.deployment is None or sc.deployment.kind not in ROLES_OF_KIND or sc.runtime != "sim":
        raise UserError(f"{scenario}: optimize needs a simulated deployment (runtime: sim; deployment.kind "
                        f"{', '.join(ROLES_OF_KIND)}), not " + (f"runtime: {sc.runtime}" if sc.runtime != "sim" else
                        f"deployment.kind {sc.deployment.kind if sc.deployment else 'unset'}"))
    chips = parse_budget(budget, sc)
    stated = nominal_requests(sc.workload.model_dump(mode="json")) or DEFAULT_REQUESTS
    measured = min(coarse_requests, stated) if coarse_requests else stated
    probes = capacity_probes(iterations)
    per_split = probes * measured * SIM_S_PER_REQUEST
    if rank not in ("bound", "pools"):
        raise UserError(f"--rank {rank}: expected bound or pools")
    if rank != "bound" and not prune:
        raise UserError(f"--rank {rank} ranks the pruned search: give --prune too")
    if prune:  # every split is bounded (arithmetic); at most max_splits are simulated
        if coarse_requests:
            raise UserError("--prune and --coarse-requests: give one (the pruned search ranks by analytic bounds)")
        from pddbench.sweep.split_bounds import can_bound

        if not can_bound(sc):
            raise UserError(f"{scenario}: --prune needs latency.kind roofline (its bounds come from the roofline model)")
        n_splits = check_split_count(sc, chips, sizes, MAX_ENUMERATED, None, "")
        check_work(f"--prune simulating up to {min(n_splits, max_splits):,} of {n_splits:,} candidate splits "
                   f"(~{probes} probes on ~{measured:,} requests each)", min(n_splits, max_splits) * per_split,
                   max_hours, " (or --max-splits fewer, fewer requests)")
        on_stage and on_stage(f"{n_splits} candidate splits bounded analytically; at most {max_splits} simulated "
                              f"({duration(per_split)} each on one core)")
    else:
        n_splits = check_split_count(sc, chips, sizes, max_splits, per_split,
                                     f"a capacity search of ~{probes} probes on ~{measured:,} requests")
        total = n_splits * per_split + (min(refine_top, n_splits) * probes * stated * SIM_S_PER_REQUEST
                                        if coarse_requests else 0)
        check_work(f"{n_splits:,} candidate splits (~{probes} probes on ~{measured:,} requests each)", total,
                   max_hours, " (or fewer --sizes, --coarse-requests, fewer requests)")
        on_stage and on_stage(f"{n_splits} candidate splits: {duration(n_splits * per_split)} of simulation on one "
                              f"core (~{probes} probes on ~{measured:,} requests each)")
    check_capacity_workload(sc, str(scenario))
    n = len(workload_requests(sc))
    with run_folder(out, results, f"{sc.name}-optimize") as folder:
        with make_executor(jobs or None, None) as ex:
            result = (optimize_pruned(sc, chips, sizes, ex, iterations, n, on_stage, max_splits, rank) if prune else
                      optimize(sc, chips, sizes, ex, iterations, n, coarse_requests, refine_top, on_stage, max_splits))
        result["provenance"] = provenance()
        write_json(folder.path / "optimize.json", result)
        optimize_figure(result, folder.path / "optimize.png")
    return result, folder.path
