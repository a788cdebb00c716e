"""Does another instance size change the best-vs-best throughput verdict? (issue 27.3)

The ledger's best splits use one instance size (8 chips), every split measured, in light and full
alike. `reproduce --full` then searches sizes 4-16 for both deployments at the same budgets, on
the same seed-0 steady trace, with `optimize --prune --rank pools` (pddbench/sweep/pool_estimates.py),
and says whether the sign of PDD's throughput change can differ from size 8's: PDD's best is at
most its ceiling (the best simulated, or the most an unsettled split could reach), the baseline's
at least its best simulated. Seed 0 only; the ledger's own rows keep the size-8 evidence."""

from __future__ import annotations

from typing import Callable

from pddbench.reproduce.best_vs_best import BUDGETS
from pddbench.schema.scenario import Scenario
from pddbench.sweep.executors import Executor

SIZES = list(range(4, 17))
MAX_SIMULATIONS = {"same-dc-pd": 40, "pdd": 16}  # after the pool stage; the rest is stated as unsettled


def search(scenarios: dict[str, Scenario], executor: Executor, iterations: int,
           on_stage: Callable[[str], None] | None = None) -> dict:
    """Both deployments' pruned size searches and what they say about the sign."""
    from pddbench.sweep.optimize import optimize_pruned

    res = {}
    for name, sc in scenarios.items():
        n = sc.workload.synth.requests if sc.workload.synth else None
        res[name] = optimize_pruned(sc, BUDGETS[name], SIZES, executor, iterations, n,
                                    on_stage and (lambda m, name=name: on_stage(f"{name}: {m}")),
                                    MAX_SIMULATIONS[name], rank="pools")
    return {"sizes": SIZES, "budgets": BUDGETS, "searches": {n: {k: r[k] for k in ("search", "best")}
                                                            for n, r in res.items()},
            **compare(res["same-dc-pd"], res["pdd"]), "results": res}


def compare(same: dict, pdd: dict) -> dict:
    """PDD's throughput change at the best splits found, its range over what the searches left
    open (PDD up to its ceiling, the baseline at least its best found), the sign where the range
    allows only one, and the words."""
    same_rps, pdd_rps = same["best"]["throughput_within_sla_rps"], pdd["best"]["throughput_within_sla_rps"]
    # the most each best split could deliver by its search's rules (optimize_pruned's ceiling_rps)
    pdd_most, same_most = pdd["search"]["ceiling_rps"], same["search"]["ceiling_rps"]
    pct = lambda a, b: round(100 * (a / b - 1), 2) if b else None
    found, most, least = pct(pdd_rps, same_rps), pct(pdd_most, same_rps), pct(pdd_rps, same_most)
    sign = "loss" if most is not None and most < 0 else "gain" if least is not None and least > 0 else None
    return {"throughput_change_pct": found, "pdd_change_at_most_pct": most, "pdd_change_at_least_pct": least,
            "sign": sign, "words": words(same, pdd, found, most, least, sign)}


def _how(r: dict) -> str:
    s = r["search"]
    return (f"{s['candidates']} splits, {s['simulations']} capacity searches ({s['refined']} splits simulated), "
            f"{s['pruned']} pruned, {s['unsettled']} unsettled")


def words(same: dict, pdd: dict, found, most, least, sign) -> str:
    head = (f"Instance sizes {SIZES[0]}-{SIZES[-1]} (seed 0, `optimize --prune --rank pools`): same-DC PD's best "
            f"{same['best']['label']} at {same['best']['throughput_within_sla_rps']:.2f} req/s ({_how(same)}); PDD's "
            f"best found {pdd['best']['label']} at {pdd['best']['throughput_within_sla_rps']:.2f} req/s ({_how(pdd)}).")
    if found is None:
        return head + " Same-DC PD met the SLA at no size, so no change can be stated."
    if sign == "loss":
        return (head + f" PDD's throughput change is {found:+.1f} % and at most {most:+.1f} % with any split the "
                "search left open (by its estimates, widened by the largest underestimate it saw): no size in the "
                "range turns PDD's loss into a gain.")
    if sign == "gain":
        return head + f" PDD's throughput change is {found:+.1f} % and at least {least:+.1f} %: a gain at these sizes."
    return (head + f" PDD's throughput change is {found:+.1f} %, between {least:+.1f} % and {most:+.1f} % over the "
            "splits the search left open: the sign is not settled here; settle it with `pddbench optimize --prune "
            "--rank pools --sizes 4-16 --max-splits 1000`.")
