"""The simulations behind the crossovers (pddbench/reproduce/crossovers.py): each deployment's
best split at an axis value by climbing (capacity is unimodal in the prefill:decode ratio), the
throughput/BCR bisection per axis, the analytic price crossover and the TTFT load crossover. Every
capacity search is memoised by (deployment, overrides, split), so a probe shared by two claims or
two bisections is simulated once."""

from __future__ import annotations

import hashlib
import math
from typing import Callable

from pddbench.measure.capacity import rate_scale_for
from pddbench.reproduce import best_vs_best as bvb
from pddbench.reproduce import crossovers as cx
from pddbench.reproduce.claim_rows import change
from pddbench.reproduce.tasks import Settings, _payload, _variant
from pddbench.sweep.executors import Executor, results_in_order
from pddbench.sweep.checked_search import top_rate
from pddbench.sweep.optimize import candidate_splits, chips_used, label, measure, with_split

Job = tuple[str, tuple[str, ...]]  # (deployment, axis overrides)


class Climber:
    """Best splits by climbing, on one executor, with every capacity kept."""

    def __init__(self, ex: Executor, cfg: Settings, requests: int, iterations: int,
                 on_stage: Callable[[str], None] | None = None):
        self.ex, self.cfg, self.requests, self.iterations = ex, cfg, requests, iterations
        self.on_stage = on_stage or (lambda _m: None)
        self.caps: dict[tuple[Job, int], dict] = {}
        self._scenarios: dict[Job, object] = {}
        self._offered: dict[str, float] = {}
        self._canon: dict[Job, Job] = {}
        self._profiles: dict[str, object] = {}  # the analytic bound's workload profile, by workload
        self._bound_rps: dict[Job, list[float] | None] = {}  # each candidate's analytic bound, by job
        self._by_content: dict[str, Job] = {}
        self.below: dict[tuple[Job, int], float] = {}  # a split that failed a neighbour check at this rate scale
        self.searches = 0  # capacity searches run, probes they simulated, how many were warm-started
        self.probes = 0
        self.warm = 0
        self.checks = 0  # neighbour checks (one simulation each)
        self.ttft_runs = 0  # simulations of both best splits at one load, for a TTFT claim (no capacity search)
        self._owner: dict[Job, str] = {}  # which axis (or stage) first asked for a job's climb
        self._by_owner: dict[str, int] = {}  # simulations per owner

    def scenario(self, job: Job):
        if job not in self._scenarios:
            dep, extra = job
            self._scenarios[job] = _variant(dep, 0, self.cfg, [f"workload.synth.requests={self.requests}", *extra])
        return self._scenarios[job]

    def claim(self, jobs, owner: str) -> None:
        """Attribute the simulations of these jobs' climbs to `owner` (an axis name, "model", ...):
        a job two axes share (the same scenario) stays with the first that asked."""
        for job in jobs:
            self._owner.setdefault(self.canon(job), owner)

    def _count(self, job: Job, simulations: int) -> None:
        self._tally(self._owner.get(job, "other"), simulations)

    def _tally(self, owner: str, simulations: int) -> None:
        self._by_owner[owner] = self._by_owner.get(owner, 0) + simulations

    def count_ttft_runs(self, simulations: int, owner: str) -> None:
        """Simulations at a load (a TTFT claim), counted to `owner`: never cached, so each is the
        asking axis's own, even where another axis first asked for the job's climb."""
        self.ttft_runs += simulations
        self._tally(owner, simulations)

    def counted(self) -> dict:
        """effort() and the simulations per owner (sums to its simulations): crossovers.json's
        settings."""
        return {**self.effort(), "simulations_by_axis": dict(sorted(self._by_owner.items()))}

    def effort(self) -> dict[str, int]:
        """What the climber has simulated so far (crossovers.json's settings)."""
        return {"capacity_searches": self.searches, "capacity_probes": self.probes,
                "warm_started_searches": self.warm, "neighbour_checks": self.checks,
                "ttft_simulations": self.ttft_runs, "simulations": self.probes + self.checks + self.ttft_runs}

    def canon(self, job: Job) -> Job:
        """The first job seen whose scenario is this one's (e.g. `model=` the shipped model, or a
        frontier row at a probed value): its capacities are this job's, never searched twice."""
        if job not in self._canon:
            key = hashlib.sha256(self.scenario(job).model_dump_json().encode()).hexdigest()
            self._canon[job] = self._by_content.setdefault(key, job)
        return self._canon[job]

    def candidates(self, dep: str) -> list[dict]:
        return candidate_splits(self.scenario((dep, ())), bvb.BUDGETS[dep], [cx.SIZE])

    def best(self, start: dict[Job, int], near: dict[Job, tuple[Job, ...]] | None = None) -> dict[Job, tuple[int, dict]]:
        """Each job's best split index and capacity: from its `start` index, move to a better
        neighbour until neither neighbour is better (all jobs' climbs at once, so the executor's
        workers share them). A neighbour is better when it holds the SLA at the rate where the
        current split first failed (the top of its capacity's bracket): one simulation checks
        that, and only a neighbour that holds there is searched in full. One that fails there is
        at most as good within the search's resolution (a tie keeps the current split).
        `near`: per job, the jobs of the nearest probes already climbed, whose capacities
        warm-start this one's searches (self.hint)."""
        canon = {j: self.canon(j) for j in start}  # a job whose scenario an earlier job already is
        if any(c != j for j, c in canon.items()):
            res = self.best({canon[j]: i for j, i in start.items()}, {canon[j]: n for j, n in (near or {}).items()})
            return {j: res[canon[j]] for j in start}
        jobs = list(start)
        count = {dep: len(self.candidates(dep)) for dep in {j[0] for j in jobs}}
        at = dict(start)
        while True:
            self._search([(j, at[j]) for j in jobs if (j, at[j]) not in self.caps], near or {})
            checks = [(j, n) for j in jobs for n in (at[j] - 1, at[j] + 1)
                      if 0 <= n < count[j[0]] and (j, n) not in self.caps and not self._known_lower(j, n, at[j])]
            self._check_and_search(checks, at, near or {})
            moved = {j: self._argbest(j, count[j[0]]) for j in jobs}
            if not checks and moved == at:
                return {j: (at[j], self.caps[(j, at[j])]) for j in jobs}
            at = moved

    def _search(self, batch: list[tuple[Job, int]], near: dict[Job, tuple[Job, ...]]) -> None:
        """Full capacity searches of (job, split index), warm-started where a neighbour is known."""
        if not batch:
            return
        self.on_stage(f"{len(batch)} capacity searches ({self.requests:,} requests each)")
        hints = [self.hint(j, i, near.get(j, ())) for j, i in batch]
        for key, cap in zip(batch, self._capacities(self._split_scenarios(batch), hints)):
            self.caps[key] = cap
            self.probes += len(cap.get("probes", ()))
            self._count(key[0], len(cap.get("probes", ())))
        self.searches += len(batch)
        self.warm += sum(h is not None for h in hints)

    def _check_and_search(self, checks: list[tuple[Job, int]], at: dict[Job, int],
                          near: dict[Job, tuple[Job, ...]]) -> None:
        """Each neighbour (job, n) is better only if it holds the SLA where the job's current split
        first failed: a capacity search warm-started there whose first probe is that check, ending
        after it where it fails (kept in self.below) and going on where it holds, so the check's
        simulation is the search's first probe, never a second one. A neighbour whose current
        split has no such rate (no rate held, or none failed) gets a plain search."""
        rated = [(j, n) for j, n in checks if self._top(j, at[j]) is not None]
        self._search([k for k in checks if k not in rated], near)
        if not rated:
            return
        self.on_stage(f"{len(rated)} neighbour checks (one simulation each; a capacity search on from each that holds)")
        tops = [self._top(j, at[j]) for j, _ in rated]
        for key, top, cap in zip(rated, tops, self._capacities(self._split_scenarios(rated), tops, True)):
            self.checks += 1
            self._count(key[0], max(1, len(cap.get("probes", ()))))  # the check, and the search on from it
            if cap.get("stopped_at_near"):
                self.below[key] = top
                continue
            self.caps[key] = cap
            self.searches += 1
            self.warm += 1
            self.probes += len(cap.get("probes", ())) - 1  # the first was the check

    def _split_scenarios(self, batch: list[tuple[Job, int]]) -> list:
        return [with_split(self.scenario(j), self.candidates(j[0])[i]) for j, i in batch]

    def _top(self, job: Job, i: int) -> float | None:
        return top_rate(self.caps[(job, i)])

    def _capacities(self, scenarios: list, hints: list[float | None], stop_if_near_fails: bool = False) -> list[dict]:
        """Capacity searches on the executor (the sweep's capacity tasks)."""
        return measure(scenarios, self.ex, self.iterations, hints, stop_if_near_fails)

    def _known_lower(self, job: Job, n: int, i: int) -> bool:
        """Split n failed a check at or below where split i first failed: it is not better."""
        top = self._top(job, i)
        return (job, n) in self.below and top is not None and self.below[(job, n)] <= top

    def hint(self, job: Job, index: int, near: tuple[Job, ...]) -> float | None:
        """A warm start for (job, split index): the same split's answers at the nearest probes,
        each scaled by how the analytic bound moves from there to here (their geometric mean:
        between two probes, an interpolation), else the nearest split's answer on this job, else on
        a nearest probe (scaled as that split's bound moves); None: a cold search. Between two
        probes the bound's move is damped by what the two answers show: capacity ~ bound**alpha,
        alpha fitted to them in [0, 1] (the bound moved the decode-bound PDD 2.3x along the output
        length where its capacity moved 1.35x: a warm start 35 % off, 9 % with alpha)."""
        job, near = self.canon(job), tuple(self.canon(j) for j in near)
        known = [(self.caps[(j, index)]["rate_scale"], self._bound_ratio(job, j, index)) for j in near
                 if (j, index) in self.caps and self.caps[(j, index)].get("rate_scale")]
        if known:
            alpha = 1.0
            if len(known) == 2 and abs(math.log(known[0][1] / known[1][1])) > 1e-9:
                (c1, r1), (c2, r2) = known  # bound here / bound there: r1 / r2 = bound at 2 / bound at 1
                alpha = min(1.0, max(0.0, math.log(c2 / c1) / math.log(r1 / r2)))
            return math.exp(sum(math.log(c) + alpha * math.log(r) for c, r in known) / len(known))
        for j in (job, *near):
            known = [i for (jj, i) in self.caps if jj == j and self.caps[(jj, i)].get("rate_scale")]
            if known:
                k = min(known, key=lambda i: (abs(i - index), i))
                # a nearest probe's split, moved along the axis as its bound moves
                return self.caps[(j, k)]["rate_scale"] * (self._bound_ratio(job, j, k) if j != job else 1.0)
        return None

    def _bounds(self, job: Job) -> list[float] | None:
        """Each candidate split's analytic capacity bound at job's scenario (pddbench/sweep/
        split_bounds.py: prefill compute, decode memory and the TPOT bound), in req/s; None where
        the scenario cannot be bounded (a calibrated latency model)."""
        from pddbench.sweep import split_bounds as sb

        job = self.canon(job)
        if job not in self._bound_rps:
            sc = self.scenario(job)
            rps = None
            if sb.can_bound(sc):
                key = sc.workload.model_dump_json()  # the profile depends on the workload alone
                if key not in self._profiles:
                    self._profiles[key] = sb.profile(sc)
                rps = [sb.bound(sc, c, self._profiles[key])["bound_rps"] for c in self.candidates(job[0])]
            self._bound_rps[job] = rps
        return self._bound_rps[job]

    def _bound_ratio(self, job: Job, near: Job, index: int) -> float:
        """How split `index`'s analytic capacity bound changes from `near`'s scenario to `job`'s: a
        warm start's scale along an axis it sees (1 where it sees none, e.g. the WAN or the TTFT
        SLA, or where either bound is 0)."""
        here, there = self._bounds(job), self._bounds(near)
        if here is None or there is None:
            return 1.0
        return here[index] / there[index] if here[index] > 0 and there[index] > 0 else 1.0

    def shifted(self, job: Job, index: int, origin: Job | None) -> int:
        """Where job's climb starts: `index` (origin's best split) moved by as many splits as the
        analytic bound's best split moves from origin's scenario to job's. The bound's best sits
        about one split off the simulated best (it leaves out queueing and the P90), but it moves
        with the axis much as the simulated best does (same-DC PD's best at TPOT 40 ms: 4 splits
        below the shipped value's, the bound's 4 below too), so a climb starts near its end
        instead of walking there a capacity search per split. Clamped to the candidates;
        `index` itself where there is no origin or either scenario cannot be bounded (a calibrated
        latency model, or no split whose weights fit)."""
        if origin is None:
            return index
        here, there = self._bounds(job), self._bounds(origin)
        if here is None or there is None or max(here) <= 0 or max(there) <= 0:
            return index
        move = here.index(max(here)) - there.index(max(there))
        return min(max(index + move, 0), len(here) - 1)

    def prefill(self, optimized: dict) -> None:
        """Keep the capacities `optimize` measured on the shipped values (its result for one
        deployment, on this climber's trace and resolution) so the climb does not repeat them."""
        dep = next(d for d, b in bvb.BUDGETS.items() if b == optimized["budget"])
        index = {label(c): i for i, c in enumerate(self.candidates(dep))}
        for row in optimized["candidates"]:
            if row.get("full") and row["label"] in index:
                self.caps[((dep, ()), index[row["label"]])] = row["full"]
            elif (row.get("check") or {}).get("holds") is False and row["label"] in index:
                self.below[((dep, ()), index[row["label"]])] = row["check"]["rate_scale"]

    def offered_rps(self, dep: str) -> float:
        """The shipped trace's offered rate at rate scale 1 (summary.offered_rps's definition)."""
        from pddbench.workload.source import workload_requests

        if dep not in self._offered:
            ts = [r.timestamp_ms for r in workload_requests(self.scenario((dep, ())))]
            self._offered[dep] = (len(ts) - 1) / ((max(ts) - min(ts)) / 1000)
        return self._offered[dep]

    def _argbest(self, job: Job, n: int) -> int:
        got = [i for i in range(n) if (job, i) in self.caps]
        return max(got, key=lambda i: (self.caps[(job, i)]["throughput_within_sla_rps"], -i))


def _advantage(claim: str, pdd: dict, same: dict) -> float | None:
    """PDD's advantage in the article's direction, in %."""
    if claim == "throughput_change_best":
        return change(pdd["throughput_within_sla_rps"], same["throughput_within_sla_rps"])
    if not pdd["throughput_within_sla_rps"] or not same["throughput_within_sla_rps"]:
        return None
    return change(pdd["bcr"], same["bcr"])


class AxisSearch:
    """The bisection of `claim` along `axis`, every probe best split against best split, as a
    step at a time (prepare the climbs of the next probe values, then finish with their results),
    so that side_by_side can climb many searches' probes in one batch. `found` (axis value -> best
    split index per deployment) is shared by the claims of one axis; `at`: another axis held at a
    value (a frontier's row, a model). The TTFT claim ("ttft_change_common") simulates both best
    splits at half the smaller capacity at each probe (the model axis's line-rate crossover)."""

    def __init__(self, cl: Climber, axis: cx.Axis, claim: str, steps: int, start: dict[str, int],
                 found: dict[float, dict], say: Callable[[str], None], at: tuple | None = None):
        self.cl, self.axis, self.claim, self.start, self.found, self.say, self.at = cl, axis, claim, start, found, say, at
        self.owner = cx.MODEL_AXIS if at and isinstance(at[0], cx.ModelChoice) else axis.name  # whose item it makes
        found.setdefault(axis.shipped, dict(start))  # the start: the shipped value's best splits, already known
        self.gen = cx.bisect_steps(axis.lo, axis.hi, steps, axis.log)
        self.pending: list[float] = next(self.gen)
        self.result: dict | None = None

    def _sets(self, d: str, a, v) -> list[str]:
        return [] if d == "same-dc-pd" and a.pdd_only else a.overrides(v)

    def job_at(self, d: str, v: float | None) -> Job:
        """Deployment d's job at axis value v (None or the shipped value: the held values alone,
        the search's start, whose probes are known)."""
        v = None if v == self.axis.shipped else v
        held = self._sets(d, *self.at) if self.at else []
        return (d, tuple(held + ([] if v is None else self._sets(d, self.axis, v))))

    def prepare(self) -> tuple[dict[Job, int], dict[Job, tuple[Job, ...]]]:
        """The climbs of the pending values: each from the nearest earlier probe's best (moved as
        the analytic bound's best moves: Climber.shifted), warm from its capacities."""
        log = self.axis.log
        distance = lambda u, v: abs(math.log(u / v)) if log and u > 0 < v else abs(u - v)
        starts, near = {}, {}
        for v in self.pending:
            u = min(self.found, key=lambda u: distance(u, v), default=None)
            # the nearest known probes on either side: the warm start interpolates between them
            sides = [max((w for w in self.found if w < v), default=None), min((w for w in self.found if w > v), default=None)]
            sides = [w for w in sides if w is not None] or [u]
            for d in cx.DEPLOYMENTS:
                index = (self.found[u] if u is not None else self.start)[d]
                starts[self.job_at(d, v)] = self.cl.shifted(self.job_at(d, v), index,
                                                            None if u is None else self.job_at(d, u))
                near[self.job_at(d, v)] = tuple(self.job_at(d, w) for w in sides)
        return starts, near

    def finish(self, res: dict[Job, tuple[int, dict]]) -> None:
        """Take the climbs' results, evaluate the claim at each pending value, take a step."""
        out = []
        for v in self.pending:
            best = {d: res[self.job_at(d, v)] for d in cx.DEPLOYMENTS}
            self.found[v] = {d: best[d][0] for d in cx.DEPLOYMENTS}
            out.append(self._advantage(v, best))
            split = lambda d: (f"{label(self.cl.candidates(d)[best[d][0]])} "
                               f"{best[d][1]['throughput_within_sla_rps']:.3g} req/s")
            held = (f", {self.at[0].name} = {self.at[1]:.4g}" if self.at and not isinstance(self.at[1], str)
                    else (f", {self.at[1]}" if self.at else ""))
            self.say(f"{self.axis.name} = {v:.4g}{held}: PDD {split('pdd')} vs same-DC {split('same-dc-pd')}: "
                     f"{self.claim} " + ("not measurable" if out[-1] is None else f"{out[-1]:+.1f} %"))
        try:
            self.pending = self.gen.send(out)
        except StopIteration as done:
            self.pending, self.result = [], done.value

    def _advantage(self, v: float, best: dict) -> float | None:
        if self.claim != "ttft_change_common":
            return _advantage(self.claim, best["pdd"][1], best["same-dc-pd"][1])
        at = {d: (self.job_at(d, v), best[d][0]) for d in cx.DEPLOYMENTS}
        smaller = min(best[d][1]["throughput_within_sla_rps"] for d in cx.DEPLOYMENTS)
        ch = _ttft_changes(self.cl, at, smaller, [cx.MODEL_LOAD_FRACTION], self.owner)[0]
        return None if ch is None else -ch  # positive: PDD faster, the article's way


def side_by_side(cl: Climber, searches: list[AxisSearch], on_done: Callable[[AxisSearch], None] | None = None,
                 owner: str | None = None) -> None:
    """Run the searches together: each round climbs every unfinished search's next probes in one
    batch (both workers of -j 2 busy; probes shared by two searches climbed once), then each takes
    its step. The rounds do not depend on timing or -j, so neither do the results. Their
    simulations are counted to `owner`, else to each search's axis (Climber.claim)."""
    while any(s.result is None for s in searches):
        active = [s for s in searches if s.result is None]
        starts, near = {}, {}
        for s in active:
            st, nr = s.prepare()
            cl.claim(st, owner or s.owner)
            for job in st:
                starts.setdefault(job, st[job])
                near.setdefault(job, nr[job])
        res = cl.best(starts, near)
        for s in active:
            s.finish(res)
            if s.result is not None and on_done:
                on_done(s)


def search_all(ex: Executor, cfg: Settings, axes: list[str], steps: int, requests: int, iterations: int,
               on_stage: Callable[[str], None] | None = None, optimized: dict[str, dict] | None = None,
               on_axis: Callable[[dict], None] | None = None, climber: Climber | None = None) -> dict:
    """Every crossover of `axes` (names of cx.AXES, plus cx.PRICE_AXIS and cx.LOAD_AXIS) for the
    claims that move along them; returns crossovers.json's content. `optimized`: optimize's
    results at the shipped values on the same trace (reproduce's), reused and climbed from;
    `on_axis` gets the result so far after each axis (what an interrupted run keeps)."""
    say = on_stage or (lambda _m: None)
    cl = climber or Climber(ex, cfg, requests, iterations, on_stage)
    index = {d: {label(c): i for i, c in enumerate(cl.candidates(d))} for d in cx.DEPLOYMENTS}
    start = {d: len(index[d]) // 2 for d in cx.DEPLOYMENTS}
    for opt in (optimized or {}).values():
        cl.prefill(opt)
    for d, opt in (optimized or {}).items():
        start[d] = index[d].get(opt["best"]["label"], start[d])
    say("best splits at the shipped values")
    cl.claim([(d, ()) for d in cx.DEPLOYMENTS], "shipped values")
    shipped = cl.best({(d, ()): start[d] for d in cx.DEPLOYMENTS})
    best_at = {d: shipped[(d, ())] for d in cx.DEPLOYMENTS}
    start = {d: best_at[d][0] for d in cx.DEPLOYMENTS}
    caps = {d: best_at[d][1] for d in cx.DEPLOYMENTS}
    fixed = "every other assumption at its shipped value (scenarios/paper/*.yaml), seed 0, " \
            f"best splits of {cx.SIZE}-chip instances at every probe, {requests:,}-request steady traces"
    by_axis: dict[str, list[dict]] = {}  # each axis's items, as they finish
    spreads: dict[str, float] = {}
    partial = lambda: _result(cl, [i for a in axes for i in by_axis.get(a, [])], spreads, best_at, requests,
                              iterations, steps)
    for name in axes:  # what needs no capacity search first
        if name == cx.PRICE_AXIS:
            by_axis[name] = _price_items(cl, caps, start, fixed)
        elif name == cx.LOAD_AXIS:
            by_axis[name] = [_load_crossover(cl, best_at, steps, fixed)]
        else:
            continue
        if on_axis:
            on_axis(partial())
    searches: list[AxisSearch] = []
    for name in axes:
        if name in cx.AXES:
            axis, found = cx.AXES[name], {}
            searches += [AxisSearch(cl, axis, claim, steps, start, found, say)
                         for claim in ("throughput_change_best", "bcr_change")]
    models = _ModelAxis(cl, start, steps, fixed, say) if cx.MODEL_AXIS in axes else None
    if models:
        searches += models.searches()
    if searches:
        say(f"{len(searches)} bisections side by side: " + ", ".join(dict.fromkeys(x.owner for x in searches)))

    def done(srch: AxisSearch) -> None:
        name = srch.owner
        mine = [x for x in searches if x.owner == name]
        if any(x.result is None for x in mine):
            return
        if name == cx.MODEL_AXIS:
            by_axis[name] = models.items()
        else:
            axis = cx.AXES[name]
            by_axis[name] = [cx.entry(x.claim, name, x.result, (axis.lo, axis.hi), fixed,
                                      f"bisection, {steps} steps{' on a log scale' if axis.log else ''}") for x in mine]
            adv = [a for _, a in mine[0].result["probes"] if a is not None]
            spreads[name] = max(adv) - min(adv) if adv else 0.0
        say(f"{name}: done")
        if on_axis:
            on_axis(partial())

    side_by_side(cl, searches, done)
    return partial()


def _price_items(cl: Climber, caps: dict, start: dict[str, int], fixed: str) -> list[dict]:
    """Chip B's price: solved exactly for BCR and cost per token; throughput does not move."""
    sc = cl.scenario(("pdd", ()))
    now = sc.chips["B"].price_per_hour
    rng = (0.0, 4 * now)
    chips_b = chips_used(sc, cl.candidates("pdd")[start["pdd"]]).get("B", 0)
    res = cx.price_crossover(caps["pdd"], caps["same-dc-pd"], chips_b, now, rng)
    thr = _advantage("throughput_change_best", caps["pdd"], caps["same-dc-pd"])
    return [cx.entry("bcr_change", cx.PRICE_AXIS, res, rng, fixed, "solved exactly: capacities do not depend on "
                     "the price, PDD's cost per hour is linear in it"),
            cx.entry("throughput_change_best", cx.PRICE_AXIS, {
                "value": None, "direction": "PDD wins across the whole range" if (thr or 0) > 0 else
                "PDD loses across the whole range", "probes": [(p, thr) for p in rng]}, rng, fixed,
                "the price changes no capacity")]


def _result(cl: Climber, items: list[dict], spreads: dict[str, float], best_at: dict, requests: int,
            iterations: int, steps: int) -> dict:
    caps = {d: best_at[d][1] for d in cx.DEPLOYMENTS}
    ranked = sorted(({"axis": a, "label": cx.AXES[a].label, "spread_pct": round(s, 2)} for a, s in spreads.items()),
                    key=lambda r: -r["spread_pct"])
    return {"crossovers": list(items), "axes_ranked": ranked,
            "shipped": {d: {"split": label(cl.candidates(d)[best_at[d][0]]),
                            "throughput_within_sla_rps": caps[d]["throughput_within_sla_rps"],
                            "bcr": caps[d]["bcr"], "bound_by": caps[d]["bound_by"]} for d in cx.DEPLOYMENTS},
            "settings": {"requests": requests, "iterations": iterations, "steps": steps, "seed": 0,
                         "chips_per_instance": cx.SIZE, **cl.counted()}}


class _ModelAxis:
    """The model axis: for each shipped model, the best splits at the shipped line and SLA with
    `model=NAME` (all models' climbs in one batch), PDD's throughput change there, its mean-TTFT
    change at half the smaller capacity, and the WAN line rate at which each of the two flips
    (two bisections per model over the rate axis's range, run side by side with the others)."""

    def __init__(self, cl: Climber, start: dict[str, int], steps: int, fixed: str, say: Callable[[str], None]):
        self.cl, self.steps, self.fixed = cl, steps, fixed
        self.choice = cx.ModelChoice()
        self.models = cx.axis_models()
        say(f"model axis: best splits of {len(self.models)} models at the shipped values")
        jobs = {m: {d: (d, tuple(self.choice.overrides(m))) for d in cx.DEPLOYMENTS} for m in self.models}
        cl.claim([jobs[m][d] for m in self.models for d in cx.DEPLOYMENTS], cx.MODEL_AXIS)
        res = cl.best({jobs[m][d]: cl.shifted(jobs[m][d], start[d], (d, ()))
                       for m in self.models for d in cx.DEPLOYMENTS},
                      {jobs[m][d]: ((d, ()),) for m in self.models for d in cx.DEPLOYMENTS})
        self.best = {m: {d: res[jobs[m][d]] for d in cx.DEPLOYMENTS} for m in self.models}
        self.thr, self.ttft, self.rate, self.ttft_rate = {}, {}, {}, {}
        axis = cx.AXES[cx.RATE_AXIS]
        for m in self.models:
            best = self.best[m]
            self.thr[m] = _advantage("throughput_change_best", best["pdd"][1], best["same-dc-pd"][1])
            self.ttft[m] = _ttft_changes(cl, {d: (jobs[m][d], best[d][0]) for d in cx.DEPLOYMENTS},
                                         min(best[d][1]["throughput_within_sla_rps"] for d in cx.DEPLOYMENTS),
                                         [cx.MODEL_LOAD_FRACTION], cx.MODEL_AXIS)[0]
            splits: dict = {}  # line rate -> best split index per deployment, shared by the model's two searches
            begin = {d: best[d][0] for d in cx.DEPLOYMENTS}
            self.rate[m] = AxisSearch(cl, axis, "throughput_change_best", steps, begin, splits, say,
                                      (self.choice, m))
            self.ttft_rate[m] = AxisSearch(cl, axis, "ttft_change_common", steps, begin, splits, say,
                                           (self.choice, m))

    def searches(self) -> list[AxisSearch]:
        return [x for m in self.models for x in (self.rate[m], self.ttft_rate[m])]

    def items(self) -> list[dict]:
        axis = cx.AXES[cx.RATE_AXIS]
        rng = (axis.lo, axis.hi)
        out = []
        for m in self.models:
            rate = cx.entry("throughput_change_best", cx.RATE_AXIS, self.rate[m].result, rng, self.fixed,
                            f"bisection, {self.steps} steps on a log scale")
            ttft_rate = cx.entry("ttft_change_common", cx.RATE_AXIS, self.ttft_rate[m].result, rng, self.fixed,
                                 f"bisection, {self.steps} steps on a log scale; TTFT at half the smaller capacity")
            out.append({"claim": "throughput_change_best", "axis": cx.MODEL_AXIS, "model": m, "value": None,
                        "range": list(rng), "direction": "", "fixed": self.fixed, "bracket": None,
                        "how": "best splits at the shipped values with model=NAME; TTFT at half the smaller capacity",
                        "probes": [], "throughput_change_pct": self.thr[m], "ttft_change_pct": self.ttft[m],
                        "rate": rate, "ttft_rate": ttft_rate,
                        "splits": {d: label(self.cl.candidates(d)[self.best[m][d][0]]) for d in cx.DEPLOYMENTS}})
        return out


def _ttft_changes(cl: Climber, at: dict[str, tuple[Job, int]], smaller: float, fractions: list[float],
                  owner: str) -> list[float | None]:
    """PDD's mean-TTFT change against same-DC PD's (%, negative: PDD faster) at loads that are
    `fractions` of `smaller` req/s, each deployment on its job's split `at[d]`; its simulations are
    counted to `owner` (Climber.count_ttft_runs)."""
    if not smaller:
        return [None for _ in fractions]
    payloads = []
    for f in fractions:
        for d in cx.DEPLOYMENTS:
            job, index = at[d]
            sc = with_split(cl.scenario(job), cl.candidates(d)[index])
            sc.workload.rate_scale = rate_scale_for(f * smaller, cl.offered_rps(d))
            payloads.append(_payload(sc, "simulate", cl.cfg))
    s = results_in_order(cl.ex, payloads, "summary", lambda i: f"TTFT at load fraction {fractions[i // 2]:g}")
    cl.count_ttft_runs(len(payloads), owner)
    return [change(s[2 * i + 1]["ttft_ms"]["mean"], s[2 * i]["ttft_ms"]["mean"]) for i in range(len(fractions))]


def _load_crossover(cl: Climber, best_at: dict, steps: int, fixed: str) -> dict:
    """Where PDD's mean TTFT goes below same-DC PD's as the common load rises (both best splits
    of the shipped values, loads as fractions of the smaller capacity)."""
    caps = {d: best_at[d][1] for d in cx.DEPLOYMENTS}
    smaller = min(c["throughput_within_sla_rps"] for c in caps.values())
    if not smaller:
        found = {"value": None, "bracket": None, "direction": "not measurable (a capacity was 0)", "probes": []}
        return cx.entry("ttft_change_common", cx.LOAD_AXIS, found, cx.LOAD_RANGE, fixed, "")

    def advantage(fractions: list[float]) -> list[float | None]:
        at = {d: ((d, ()), best_at[d][0]) for d in cx.DEPLOYMENTS}
        # positive: PDD's TTFT lower, the article's way
        return [None if ch is None else -ch for ch in _ttft_changes(cl, at, smaller, fractions, cx.LOAD_AXIS)]

    found = cx.bisect(advantage, *cx.LOAD_RANGE, steps, False)
    return cx.entry("ttft_change_common", cx.LOAD_AXIS, found, cx.LOAD_RANGE,
                    fixed.replace("best splits", "the shipped values' best splits") + f"; loads as fractions of the "
                    f"smaller capacity, {smaller:.3g} req/s", f"bisection, {steps} steps")


def run_crossovers(axes_text: str, steps: int, requests: int, iterations: int, jobs: int | None, ray: str | None,
                   out, results, max_searches: int, on_stage: Callable[[str], None] | None = None,
                   frontier_text: str | None = None, frontier_points: int = 3, max_hours: float = math.inf):
    """`pddbench crossovers`: sizes checked and estimated first, then the search into `out` or a
    new RESULTS/crossovers/<run-id>/: crossovers.json, crossovers.png, crossovers.md, and with
    `frontier_text` ("X,Y") the 2-D frontier (frontier.png)."""
    from pddbench.core.io import check_out_options, run_folder, write_json, write_text
    from pddbench.core.limits import SIM_S_PER_REQUEST, check_size, check_work, duration, warm_probes
    from pddbench.core.provenance import provenance
    from pddbench.reproduce.crossover_figure import crossover_figure, frontier_figure
    from pddbench.core.ray_cluster import check_ray_option
    from pddbench.sweep.executors import make_executor

    check_out_options(out, results)
    axes = cx.parse_axes(axes_text)
    front_axes = cx.parse_frontier(frontier_text) if frontier_text else None
    # a search's probes and its share of the climbs' one-simulation neighbour checks
    per_search = (warm_probes(iterations) + cx.CHECKS_PER_SEARCH) * requests * SIM_S_PER_REQUEST
    n = cx.estimated_searches(axes, steps, front_axes, frontier_points)
    check_size(f"--axes {','.join(axes)} with --steps {steps} needs about", n, max_searches, per_search,
               "give --max-searches N (or fewer --axes, fewer --steps)",
               f"a warm-started capacity search of ~{warm_probes(iterations)} probes on {requests:,} requests",
               unit=" capacity searches")
    check_work(f"--axes {','.join(axes)}: about {n:,} capacity searches of ~{warm_probes(iterations)} probes on "
               f"{requests:,} requests", n * per_search, max_hours, " (or fewer --requests, --axes, --steps)")
    check_ray_option(ray)
    say = on_stage or (lambda _m: None)
    say(f"about {n} capacity searches: {duration(n * per_search)} of simulation on one core")
    cfg = Settings.make(requests=requests, seeds=1)
    with run_folder(out, results, "crossovers") as folder:
        partial: dict = {}

        def keep(res: dict) -> None:  # each finished axis, so that Ctrl-C keeps what was measured
            partial.update(res, complete=False, interrupted=True)
            write_json(folder.path / "crossovers.json", partial)
            folder.interrupted(f"crossovers.json ({len({i['axis'] for i in res['crossovers']})} axes searched)")

        with make_executor(jobs, ray) as ex:
            cl = Climber(ex, cfg, requests, iterations, say)  # one for the axes and the frontier: nothing searched twice
            result = search_all(ex, cfg, axes, steps, requests, iterations, on_stage=say, on_axis=keep, climber=cl)
            if front_axes:
                keep(result)
                result["frontier"] = frontier(ex, cfg, *front_axes, cx.frontier_values(front_axes[1], frontier_points),
                                              steps, requests, iterations, say, climber=cl)
        result["settings"].update(cl.counted(), estimated_capacity_searches=n, estimated_simulations=(
            n * (warm_probes(iterations) + cx.CHECKS_PER_SEARCH) + cx.estimated_ttft_simulations(axes, steps)))
        result.update(complete=True, interrupted=False)
        result["words"] = cx.words(result["crossovers"])
        if front_axes:
            result["words"].append(cx.frontier_words(result["frontier"]))
            frontier_figure(result["frontier"], f"Where PDD's throughput within SLA beats same-DC PD's ({requests:,} "
                            "requests, seed 0, best splits at every probe)", folder.path / "frontier.png")
        result["provenance"] = provenance()
        write_json(folder.path / "crossovers.json", result)
        crossover_figure(result, f"Where PDD's advantage over same-DC PD changes sign ({requests:,} requests, seed 0, "
                         "best splits at every probe)", folder.path / "crossovers.png")
        write_text(folder.path / "crossovers.md", "# Crossovers\n\n" + "\n".join(f"- {w}" for w in result["words"])
                   + "\n\n![crossovers](crossovers.png)\n" + ("\n![frontier](frontier.png)\n" if front_axes else ""))
    return result, folder.path


FRONTIER_POINTS = 3  # values of the frontier's second axis (its ends and the middle)
REPRODUCE_STEPS = 3  # reproduce --full's bisection steps per axis (1/8 of each range; `crossovers --steps` for more)


def for_reproduce(cfg: Settings, optimized: dict[str, dict], on_stage: Callable[[str], None] | None = None) -> dict:
    """reproduce's crossovers on its own steady trace, climbing from the splits the split search
    ranked: every axis in both modes (the answer's crossovers are the same light or full); --full
    adds the 2-D frontier of the two axes that move the throughput gain most."""
    from pddbench.sweep.executors import make_executor

    axes = [*cx.AXES, cx.PRICE_AXIS, cx.LOAD_AXIS, cx.MODEL_AXIS]
    with make_executor(cfg.jobs, cfg.ray) as ex:
        cl = Climber(ex, cfg, cfg.capacity_requests, cfg.capacity_iterations, on_stage)
        res = search_all(ex, cfg, axes, REPRODUCE_STEPS, cfg.capacity_requests, cfg.capacity_iterations, on_stage,
                         optimized, climber=cl)
        res["words"] = cx.words(res["crossovers"])
        top = [r["axis"] for r in res["axes_ranked"][:2]]
        if cfg.full and len(top) == 2:  # the two axes that move the throughput gain most
            res["frontier"] = frontier(ex, cfg, *top, cx.frontier_values(top[1], FRONTIER_POINTS), REPRODUCE_STEPS,
                                       cfg.capacity_requests, cfg.capacity_iterations, on_stage, optimized, climber=cl)
            res["words"].append(cx.frontier_words(res["frontier"]))
        res["settings"].update(cl.counted())
    res["not_searched"] = []  # the answer's wording still takes a list (a `crossovers --axes` subset)
    return res


def frontier(ex: Executor, cfg: Settings, x: str, y: str, y_values: list[float], steps: int, requests: int,
             iterations: int, on_stage: Callable[[str], None] | None = None,
             optimized: dict[str, dict] | None = None, climber: Climber | None = None) -> dict:
    """The 2-D frontier of the throughput claim: for each value of axis `y`, the crossover along
    axis `x` (None where the sign does not change), so a figure can shade where PDD wins."""
    say = on_stage or (lambda _m: None)
    cl = climber or Climber(ex, cfg, requests, iterations, on_stage)
    before = cl.effort()
    for opt in (optimized or {}).values():
        cl.prefill(opt)
    # climbs start from the shipped values' best where it is known (a shared climber), else the middle
    start = {d: cl._argbest((d, ()), n) if any(k[0] == (d, ()) for k in cl.caps) else n // 2
             for d in cx.DEPLOYMENTS for n in [len(cl.candidates(d))]}
    ax, ay = cx.AXES[x], cx.AXES[y]
    say(f"frontier: throughput along {x} at {y} = {', '.join(f'{v:g}' for v in y_values)}, side by side")
    searches = [AxisSearch(cl, ax, "throughput_change_best", steps, start, {}, say, (ay, v)) for v in y_values]
    side_by_side(cl, searches, owner="frontier")
    rows = []
    for v, srch in zip(y_values, searches):
        res = srch.result
        rows.append({"y": v, "value": res["value"], "bracket": res.get("bracket"), "direction": res["direction"],
                     "probes": [{"value": a, "advantage_pct": b} for a, b in res["probes"]]})
    return {"claim": "throughput_change_best", "x": x, "y": y, "x_range": [ax.lo, ax.hi], "rows": rows,
            "settings": {"requests": requests, "iterations": iterations, "steps": steps, "seed": 0,
                         **{k: v - before[k] for k, v in cl.effort().items()}}}
