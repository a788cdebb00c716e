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
from typing import Callable

from pddbench.errors import UserError
from pddbench.scenario import ROLES_OF_KIND, Scenario
from pddbench.sweep.executors import Executor, results_in_order
from pddbench.sweep.payload import make_payload, ship_scenario

MAX_CANDIDATES = 500
SHORT = {"prefill": "P", "decode": "D", "relay": "RLD", "main": "MD"}


def parse_budget(text: str, sc: Scenario) -> dict[str, int]:
    """'A=43,B=32' -> {A: 43, B: 32}; a bare number is the budget of the one chip kind the pools use."""
    chips = {p.chip for p in sc.deployment.pools().values() if p is not None}
    out: dict[str, int] = {}
    for part in (x.strip() for x in text.split(",") if x.strip()):
        name, _, num = part.rpartition("=")
        if not name:
            if len(chips) != 1:
                raise UserError(f"--budget {text}: the pools use chips {sorted(chips)}; give one budget each, e.g. "
                                + ",".join(f"{c}=N" for c in sorted(chips)))
            name = next(iter(chips))
        try:
            out[name.strip()] = int(num)
        except ValueError:
            raise UserError(f"--budget {text}: '{num}' is not a whole number of chips") from None
    missing = chips - set(out)
    if missing:
        raise UserError(f"--budget {text}: no budget for chip(s) {sorted(missing)} the deployment uses")
    return out


def _group(roles: list[str], budget: int, sizes: list[int]) -> list[dict]:
    """Maximal splits of one chip kind's budget over `roles`: each role >= 1 instance of a size in
    `sizes`, total <= budget, and no role could take one more instance."""
    out = []
    for sz in itertools.product(sizes, repeat=len(roles)):
        def counts(i: int, left: int):
            if i == len(roles):
                yield ()
                return
            for n in range(1, left // sz[i] + 1):
                for rest in counts(i + 1, left - n * sz[i]):
                    yield (n, *rest)
        for ns in counts(0, budget):
            left = budget - sum(n * s for n, s in zip(ns, sz))
            if left < min(sz):
                out.append({r: {"instances": n, "chips_per_instance": s} for r, n, s in zip(roles, ns, sz)})
    return out


def candidate_splits(sc: Scenario, budget: dict[str, int], sizes: list[int]) -> list[dict]:
    """Every maximal split, in a fixed order (the product over chip kinds, sorted by name)."""
    roles = ROLES_OF_KIND[sc.deployment.kind]
    by_chip: dict[str, list[str]] = {}
    for r in roles:
        by_chip.setdefault(getattr(sc.deployment, r).chip, []).append(r)
    groups = [_group(rs, budget[c], sizes) for c, rs in sorted(by_chip.items())]
    out = [{k: v for g in combo for k, v in g.items()} for combo in itertools.product(*groups)]
    if not out:
        raise UserError(f"no split fits the budget {budget} with chips per instance {sizes} "
                        f"(every pool of {sc.deployment.kind} needs at least one instance)")
    if len(out) > MAX_CANDIDATES:
        raise UserError(f"{len(out)} candidate splits (more than {MAX_CANDIDATES}): use fewer --sizes or a smaller budget")
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


def measure(scenarios: list[Scenario], executor: Executor, iterations: int) -> list[dict]:
    """Each scenario's capacity result, as `capacity` tasks (the sweep's capacity measure)."""
    cache: dict = {}
    payloads = []
    for sc in scenarios:
        data, blobs = ship_scenario(sc, cache)
        payloads.append(make_payload({"kind": "capacity", "scenario": data, "iterations": iterations}, blobs))
    return results_in_order(executor, payloads, "capacity", lambda _i: "capacity of a candidate")


def _brief(cap: dict) -> dict:
    keys = ("throughput_within_sla_rps", "bcr", "cost_per_hour", "bound_by", "bound_by_all", "resolution_rate_scale",
            "requests", "steady_window", "warnings")
    return {k: cap.get(k) for k in keys}


def optimize(sc: Scenario, budget: dict[str, int], sizes: list[int], executor: Executor, iterations: int = 7,
             requests: int | None = None, coarse_requests: int | None = None, refine_top: int = 3,
             on_stage: Callable[[str], None] | None = None) -> dict:
    """Measure the candidates (coarse first when asked) and return optimize.json's content."""
    splits = candidate_splits(sc, budget, sorted(set(sizes)))
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
    best = rows[best_i]
    own = {r: {"instances": p.instances, "chips_per_instance": p.chips_per_instance}
           for r, p in sc.deployment.pools().items() if r in ROLES_OF_KIND[sc.deployment.kind]}
    return {
        "scenario": sc.name, "deployment": sc.deployment.kind, "budget": budget, "sizes": sorted(set(sizes)),
        "sla": sc.sla.model_dump(), "iterations": iterations,
        "search": {"splits": "maximal (no pool could take one more instance within its chip budget)",
                   "candidates": len(rows), "requests": requests, "coarse_requests": coarse,
                   "refined": len(chosen), "refine_top": refine_top if coarse else None},
        "scenario_split": label(own),
        "candidates": rows,
        "best": {"label": best["label"], "split": best["split"], "chips": best["chips"], **best["full"]},
    }


def run_optimize(scenario, overrides: list[str], budget: str, sizes: list[int], out, results, jobs: int = 1,
                 iterations: int = 7, coarse_requests: int | None = None, refine_top: int = 3,
                 on_stage: Callable[[str], None] | None = None):
    """Write optimize.json and optimize.png into `out` or a new RESULTS/<name>-optimize/<run-id>/."""
    from pddbench.capacity import check_capacity_workload
    from pddbench.io import check_out_options, run_folder, write_json
    from pddbench.provenance import provenance
    from pddbench.report.optimize_figure import optimize_figure
    from pddbench.scenario import load_scenario
    from pddbench.sweep.executors import make_executor
    from pddbench.workload.source import workload_requests

    check_out_options(out, results)
    sc = load_scenario(scenario, overrides)
    if sc.deployment is None or sc.deployment.kind not in ROLES_OF_KIND:
        raise UserError(f"{scenario}: optimize needs a simulated deployment ({', '.join(ROLES_OF_KIND)})")
    chips = parse_budget(budget, sc)
    check_capacity_workload(sc, str(scenario))
    n = len(workload_requests(sc))
    with run_folder(out, results, f"{sc.name}-optimize") as folder:
        with make_executor(jobs or None, None) as ex:
            result = optimize(sc, chips, sizes, ex, iterations, n, coarse_requests, refine_top, on_stage)
        result["provenance"] = provenance()
        write_json(folder.path / "optimize.json", result)
        optimize_figure(result, folder.path / "optimize.png")
    return result, folder.path
