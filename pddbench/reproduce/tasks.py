"""The simulations of `pddbench reproduce` and how they are run: the settings, the scenario
variants and sweeps, every task as (key, payload), and the three stages on one executor
(`simulate_all`): each deployment's best split at the article's chip counts
(pddbench/reproduce/best_vs_best.py, `optimize` on seed 0); every simulation that needs no measured
capacity (shipped and best splits, the equal-prefill control, the regime's capacities, bathtub,
map, variants); then the runs whose load comes from those capacities: the regime variants at the
regime load and the load ladder (pddbench/reproduce/regime.py), and both best splits at common loads
(pddbench/reproduce/common_load.py).
The measurements and the ledger are pddbench/reproduce/job.py's."""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from rich.console import Console

from pddbench.reproduce import best_vs_best as bvb
from pddbench.reproduce import regime
from pddbench.reproduce import common_load
from pddbench.reproduce import sizes_check
from pddbench.core.io import write_json, write_text
from pddbench.measure.capacity import MIN_REQUESTS
from pddbench.core.shipped import SCENARIOS
from pddbench.workload.synth import MOONCAKE_LIKE_HIST, PDD_LIKE_HIST

console = Console(stderr=True)
PAPER = SCENARIOS / "paper"
REQUESTS_ENV = "PDDBENCH_REPRODUCE_REQUESTS"  # a tiny request count for tests (as --requests)

# Scenario variants simulated on every seed: name -> (paper file, extra overrides).
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "same-dc-pd": ("same-dc-pd", []), "cross-dc-pd": ("cross-dc-pd", []), "pdd": ("pdd", []),
    "pdd-no-drc": ("pdd", ["name=pdd-no-drc", "deployment.main.prefix_cache=false"]),
    "pdd-one-shot": ("pdd-one-shot", []), "pdd-catch-up": ("pdd-catch-up", []),
    "pdd-relay-only-ablation": ("pdd-relay-only-ablation", []),
    "pdd-no-singular-filter": ("pdd-no-singular-filter", []), "pdd-64k-1k-90hit": ("pdd-64k-1k-90hit", []),
    "regime-same-dc-pd": ("regime-same-dc-pd", []), "regime-cross-dc-pd": ("regime-cross-dc-pd", []),
    "regime-pdd": ("regime-pdd", []),
}
SEARCHED = ["same-dc-pd", "pdd"]  # throughput within SLA, per seed
REGIME = [n for n in VARIANTS if n.startswith("regime-")]  # run at the load pddbench/reproduce/regime.py chooses
COMMON = ["best-same-dc-pd", "best-pdd"]  # the common-load sweep's pair (pddbench/reproduce/common_load.py)

# The bathtub: a fixed workload on both deployments, hit rate swept (stated, not fitted).
BATHTUB_SET = ["workload.source=fixed", "workload.fixed.input_tokens=32768", "workload.fixed.output_tokens=256",
               "workload.fixed.rate_rps=1.0"]
HIT_LIGHT = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.9]
HIT_FULL = [round(0.05 * i, 2) for i in range(21)]

# The sensitivity map: assumptions the article leaves open. Same-DC PD has no WAN and no chip B.
MAP_FULL = {"sla.tpot_ms": [60, 100, 150], "network.wan": ["cross-city-10g", "cross-city-100g"],
            "model.kv_bytes_per_token": [4400, 16000, 47606], "workload.synth.output_median_tokens": [100, 250, 1000],
            "chips.B.memory_bw_tbps": [3.35, 4.8],
            "workload.synth.target_hist": [list(PDD_LIKE_HIST), list(MOONCAKE_LIKE_HIST)]}
MAP_LIGHT = {"sla.tpot_ms": [60, 150], "network.wan": ["cross-city-10g", "cross-city-100g"],
             "model.kv_bytes_per_token": [4400, 47606]}
PDD_ONLY_AXES = ("network.wan", "chips.B.memory_bw_tbps")
HIT_MIX_NAMES = {tuple(PDD_LIKE_HIST): "PDD-like (80% >95%)", tuple(MOONCAKE_LIKE_HIST): "Mooncake-like (58% <90%)"}


@dataclass
class Settings:
    """One reproduce run as the command line states it."""
    requests: int = 1000          # per generated trace (the regime scenarios keep their own 1,500)
    seeds: int = 3                # seed and workload seed 0 .. seeds-1
    full: bool = False            # the whole sensitivity map and a finer bathtub
    jobs: int | None = None
    ray: str | None = None
    iterations: int = 5           # capacity search steps after bracketing
    map_requests: int = 400
    bathtub_requests: int = 150
    # the capacities behind verdicts (shipped and best splits): steady-state traces, fine resolution,
    # each checked against the same search on twice the requests (seed 0; CONVERGED_PCT)
    capacity_requests: int = MIN_REQUESTS
    capacity_iterations: int = 7
    capacity_doublings: int = 1   # a capacity that moved on 2n is searched again on 2n (checked on 4n), this often
    started: float = field(default_factory=time.perf_counter)

    @classmethod
    def make(cls, full: bool = False, jobs: int | None = None, ray: str | None = None,
             requests: int | None = None, seeds: int = 3) -> "Settings":
        env = os.environ.get(REQUESTS_ENV)
        n = requests or (int(env) if env else None)
        if full:
            s = cls(requests=n or 4000, seeds=seeds, full=True, jobs=jobs, ray=ray, iterations=7, map_requests=2000,
                    bathtub_requests=400)
        else:
            s = cls(requests=n or 1000, seeds=seeds, jobs=jobs, ray=ray)
        if n and n < 200:  # a tiny test run: everything small (and its capacity rows inconclusive)
            s.map_requests, s.bathtub_requests, s.iterations = n, n, 3
            s.capacity_requests, s.capacity_iterations = n, 3
        elif n:
            s.capacity_requests = max(n, MIN_REQUESTS)
        return s


# ---------------------------------------------------------------- tasks


def _overrides(name: str, seed: int, cfg: Settings) -> list[str]:
    from pddbench.schema.scenario import load_scenario

    file, extra = VARIANTS[name]
    sc = load_scenario(PAPER / f"{file}.yaml")
    out = [f"seed={seed}"]
    if sc.workload.resolved_source() == "fixed":
        out += [f"workload.fixed.seed={seed}"]
        if cfg.requests < 200:
            out += [f"workload.fixed.requests={min(sc.workload.fixed.requests, cfg.requests)}"]
    else:
        out += [f"workload.synth.seed={seed}"]
        if not name.startswith("regime-") or cfg.requests < 200:
            out += [f"workload.synth.requests={cfg.requests}"]
    return out + extra


def _variant(name: str, seed: int, cfg: Settings, extra: list[str] | tuple = ()):
    """A variant's scenario on one seed, with `extra` overrides after the variant's own."""
    from pddbench.schema.scenario import load_scenario

    return load_scenario(PAPER / f"{VARIANTS[name][0]}.yaml", _overrides(name, seed, cfg) + list(extra))


def _payload(sc, kind: str, cfg: Settings, log: str = "", iterations: int | None = None, near: float | None = None):
    """A worker's task; `near`: a capacity search's warm start (pddbench/measure/capacity.py)."""
    from pddbench.sweep.payload import make_payload, ship_scenario

    data, blobs = ship_scenario(sc)
    task: dict = {"kind": kind, "scenario": data}
    if kind == "capacity":
        task["iterations"] = iterations or cfg.iterations
        if near:
            task["near"] = near
    if kind == "run_folder":
        task["scenario_yaml"] = yaml.safe_dump(sc.model_dump(mode="json"), sort_keys=False)
        task["log"] = [log]
    return make_payload(task, blobs)


def _scenario_task(name: str, seed: int, cfg: Settings, kind: str, extra: list[str] | tuple = (),
                   iterations: int | None = None):
    sc = _variant(name, seed, cfg, extra)
    return _payload(sc, kind, cfg, f"scenario {VARIANTS[name][0]} overrides {_overrides(name, seed, cfg) + list(extra)}",
                    iterations)


def _split_scenario(mname: str, split: dict, seed: int, cfg: Settings, extra: list[str] | tuple = ()):
    """A measured deployment of the best-vs-best comparison: its paper scenario with `split`."""
    from pddbench.sweep.optimize import with_split

    return with_split(_variant(bvb.MEASURED[mname], seed, cfg, [f"name={mname}", *extra]), split)


def _sweep_points(out: Path, name: str, base: str, measure: str, sets: list[str], axes: dict, iterations: int):
    """A sweep file written into the run folder and expanded by the sweep engine (pddbench sweep
    reads the same file): its points, each with its axis values."""
    from pddbench.sweep.spec import load_sweep

    spec = {"base": base, "name": name, "measure": measure, "repeats": 1, "set": sets, "axes": axes}
    if measure == "capacity":
        spec["capacity"] = {"iterations": iterations}
    path = out / "sweeps" / f"{name}.yaml"
    write_text(path, yaml.safe_dump(spec, sort_keys=False))
    return load_sweep(path).points


def searched_rate_scales(best: dict, plan: dict) -> dict[str, float]:
    """Per deployment measured on every seed, the seed-0 answer's rate scale where the split search
    measured its split in full: the warm start of its other seeds' and longer traces' searches."""
    from pddbench.sweep.optimize import label

    out = {}
    for name, split in [*((n, best[n]["scenario_split"]) for n in SEARCHED),
                        *((n, p["split"]) for n, p in plan.items())]:
        dep = bvb.MEASURED.get(name, name)
        want = split if isinstance(split, str) else label(split)
        row = next((r for r in best[dep]["candidates"] if r["label"] == want and r.get("full")), None)
        if row and row["full"].get("rate_scale"):
            out[name] = row["full"]["rate_scale"]
    return out


def build_tasks(out: Path, cfg: Settings, plan: dict, near: dict[str, float] | None = None) -> list[tuple[tuple, object]]:
    """Every simulation that needs no other's result, as (key, payload), longest first: capacity
    searches (the shipped splits, the best splits and control of `plan`, the regime's capacities),
    then runs. The regime runs and the common loads come later (`dependent_tasks`). `near`: warm
    starts by deployment (searched_rate_scales)."""
    from pddbench.sweep.payload import make_payload

    tasks: list[tuple[tuple, object]] = []

    def capacity_task(key: tuple, n: int):
        name, seed = key[1], key[2]
        sets = [f"workload.synth.requests={n}"]
        sc = _variant(name, seed, cfg, sets) if name in SEARCHED else _split_scenario(name, plan[name]["split"], seed, cfg, sets)
        return key, _payload(sc, "capacity", cfg, iterations=cfg.capacity_iterations, near=(near or {}).get(name))

    for name in SEARCHED + list(plan):  # the convergence check: seed 0 on twice the requests
        if name not in reused_capacities(plan, 1):  # (the control, where it is PDD's best split)
            tasks.append(capacity_task(("convergence", name, 0), 2 * cfg.capacity_requests))
    for seed in range(cfg.seeds):
        for name in SEARCHED + list(plan):
            if name not in reused_capacities(plan, seed):
                tasks.append(capacity_task(("capacity", name, seed), cfg.capacity_requests))
    for seed in range(cfg.seeds):
        for name in regime.MEASURED:
            # the load ladder's rungs, and so two verdicts, rest on it: the verdicts' resolution in
            # both modes (light at 5 steps once gave another P50-at-capacity verdict than full)
            tasks.append((("regime_capacity", name, seed),
                          _scenario_task(name, seed, cfg, "capacity", regime.capacity_overrides(),
                                         cfg.capacity_iterations)))
    for dep, base in (("pdd", "paper/pdd"), ("same-dc-pd", "paper/same-dc-pd")):
        hits = HIT_FULL if cfg.full else HIT_LIGHT
        sets = BATHTUB_SET + [f"workload.fixed.requests={cfg.bathtub_requests}"]
        for p in _sweep_points(out, f"bathtub-{dep}", base, "capacity", sets, {"workload.fixed.hit_rate": hits},
                               cfg.iterations):
            tasks.append((("bathtub", dep, p.axes["workload.fixed.hit_rate"]), make_payload(p.task, p.blobs)))
    grid = MAP_FULL if cfg.full else MAP_LIGHT
    for dep, base in (("pdd", "paper/pdd"), ("same-dc-pd", "paper/same-dc-pd")):
        axes = {k: v for k, v in grid.items() if dep == "pdd" or k not in PDD_ONLY_AXES}
        for measure in ("capacity", "run"):
            for p in _sweep_points(out, f"map-{dep}-{measure}", base, measure,
                                   [f"workload.synth.requests={cfg.map_requests}"], axes, cfg.iterations):
                key = json.dumps({k: p.axes[k] for k in axes}, sort_keys=True)
                tasks.append((("map", dep, measure, key), make_payload(p.task, p.blobs)))
    for seed in range(cfg.seeds):
        for name in VARIANTS:
            if name not in REGIME:
                kind = "run_folder" if seed == 0 else "simulate"
                tasks.append((("run", name, seed), _scenario_task(name, seed, cfg, kind)))
        for mname, p in plan.items():
            sc = _split_scenario(mname, p["split"], seed, cfg)
            kind = "run_folder" if seed == 0 else "simulate"
            tasks.append((("run", mname, seed), _payload(sc, kind, cfg, f"{mname}: split {p['label']}, seed {seed}")))
    return tasks


def reused_capacities(plan: dict, seed: int) -> dict[str, str]:
    """Capacities not searched again: on seed 0 the best splits' own (optimize measured them on the
    same trace, cfg.capacity_requests, at the same resolution), and the control's wherever it is
    PDD's best split. Measured name -> source."""
    out = {n: "optimize" for n in ("best-same-dc-pd", "best-pdd")} if seed == 0 else {}
    if plan["control-pdd"]["split"] == plan["best-pdd"]["split"]:
        out["control-pdd"] = "best-pdd"
    return out


def fill_reused(results: dict, best: dict, plan: dict, cfg: Settings, only_copies: bool = False) -> None:
    """Put the reused capacities (reused_capacities) under their measured names; `only_copies`:
    refresh the control's copy of PDD's best (after a doubling), not optimize's."""
    for seed in range(cfg.seeds):
        for mname, src in reused_capacities(plan, seed).items():
            if src == "optimize" and not only_copies:
                results[("capacity", mname, seed)] = {"capacity": best[bvb.MEASURED[mname]]["best"]}
    for seed in range(cfg.seeds):
        for mname, src in reused_capacities(plan, seed).items():
            if src != "optimize":
                results[("capacity", mname, seed)] = results[("capacity", src, seed)]
                if seed == 0 and ("convergence", src, 0) in results:
                    results[("convergence", mname, 0)] = results[("convergence", src, 0)]


def unconverged(results: dict, plan: dict) -> list[str]:
    """The verdicts' deployments whose seed-0 capacity moved beyond CONVERGED_PCT on twice the
    requests (the control is left out where it is a copy of PDD's best)."""
    from pddbench.reproduce.claim_rows import convergence

    names = [n for n in SEARCHED + list(plan) if n not in reused_capacities(plan, 1)]
    return [n for n in names if ("convergence", n, 0) in results and not
            convergence(n, results[("capacity", n, 0)]["capacity"], results[("convergence", n, 0)]["capacity"])["converged"]]


def doubled_tasks(results: dict, cfg: Settings, plan: dict, names: list[str]) -> list[tuple[tuple, object]]:
    """For each deployment in `names`, its capacities again on the trace its check used (2n: seed 0
    takes the check's own result) and a new check on 4n. Every seed's capacity of a claim then
    comes from the same trace length, and the check stays n vs 2n."""
    tasks = []
    for name in names:
        checked = results[("convergence", name, 0)]["capacity"]
        n2 = checked["requests"]
        results[("capacity", name, 0)] = {"capacity": checked}
        for key, n in [(("convergence", name, 0), 2 * n2)] + [(("capacity", name, s), n2) for s in range(1, cfg.seeds)]:
            sets = [f"workload.synth.requests={n}"]
            sc = (_variant(name, key[2], cfg, sets) if name in SEARCHED
                  else _split_scenario(name, plan[name]["split"], key[2], cfg, sets))
            tasks.append((key, _payload(sc, "capacity", cfg, iterations=cfg.capacity_iterations,
                                        near=checked.get("rate_scale"))))
    return tasks


def regime_line_capacities(cfg: Settings, results: dict) -> list[float | None]:
    """Per seed, the WAN line's capacity in req/s at the KV bytes per request cross-DC PD shipped
    at its regime capacity probe (pddbench/reproduce/regime.py)."""
    from netem.link_model import effective_rate_gbps

    out = []
    for seed in range(cfg.seeds):
        res = results[("regime_capacity", "regime-cross-dc-pd", seed)]
        sc = _variant("regime-cross-dc-pd", seed, cfg)
        rate = effective_rate_gbps(sc.network.wan_profile(), lines=sc.network.wan_lines)
        out.append(regime.line_capacity_rps(res["summary"], rate) if res.get("summary") else None)
    return out


def dependent_tasks(cfg: Settings, plan: dict, results: dict, regime_load: dict, loads: dict,
                    ladder: dict) -> list[tuple[tuple, object]]:
    """The runs that need measured capacities: the regime variants at the regime load, same-DC and
    cross-DC PD on the load ladder (pddbench/reproduce/regime.py), and both best splits at every common load
    (each seed's rate scale from its own trace's rate)."""
    from pddbench.measure.capacity import rate_scale_for

    tasks: list[tuple[tuple, object]] = []
    for seed in range(cfg.seeds):
        probe = results[("regime_capacity", regime.MEASURED[0], seed)]["capacity"]["probes"][0]
        scale = rate_scale_for(regime_load["load_rps"], probe["offered_rps"], probe["rate_scale"])
        for name in REGIME:  # the variants share the workload: one rate scale per seed
            kind = "run_folder" if seed == 0 else "simulate"
            tasks.append((("run", name, seed), _scenario_task(name, seed, cfg, kind, [f"workload.rate_scale={scale:.9g}"])))
        for i, load in enumerate(ladder["loads_rps"]):
            if load <= 0:
                continue
            rung = [f"workload.rate_scale={rate_scale_for(load, probe['offered_rps'], probe['rate_scale']):.9g}"]
            for name in regime.MEASURED:
                lines = [f"network.wan_lines={ladder['wan_lines']}"] if name == "regime-cross-dc-pd" else []
                tasks.append((("ladder", name, i, seed), _scenario_task(name, seed, cfg, "simulate", rung + lines)))
        if loads["loads_rps"][-1] <= 0:  # a deployment never held the SLA: no common load to compare at
            continue
        for mname in COMMON:
            base = results[("run", mname, seed)]["summary"]  # this seed's trace at rate scale 1
            for i, load in enumerate(loads["loads_rps"]):
                sc = _split_scenario(mname, plan[mname]["split"], seed, cfg,
                                     [f"workload.rate_scale={rate_scale_for(load, base['offered_rps']):.9g}"])
                tasks.append((("common", mname, i, seed), _payload(sc, "simulate", cfg)))
    return tasks


def cpu_seconds() -> float:
    """CPU seconds of this process and its finished workers: the run's cost whatever the load."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return round(me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, 1)


def run_tasks(out: Path, cfg: Settings, tasks, ex, walls: dict[str, float]) -> dict:
    """Run every task through the executor `ex` (-j / --ray); results by key. Seed-0 runs become
    run folders under runs/ (records, summary, figures) for the comparisons and figures."""
    from pddbench.core.io import atomic_path, run_folder

    results: dict = {}
    for i, text in ex.run([p for _, p in tasks]):
        key = tasks[i][0]
        res = json.loads(text)
        if res["status"] != "ok":
            raise RuntimeError(f"{key} failed: {res['error']}")
        if "files" in res:
            name = key[1]
            with run_folder(out / "runs" / name, out, name) as folder:
                for fname, b64 in res["files"].items():
                    with atomic_path(folder.path / fname) as tmp:
                        tmp.write_bytes(base64.b64decode(b64))
            res = {"summary": json.loads((folder.path / "summary.json").read_text()), "folder": folder.path}
        results[key] = res
        walls[key[0]] = walls.get(key[0], 0.0) + res.get("wall_s", 0.0)
    console.print(f"  {len(tasks)} simulations and searches done at {time.perf_counter() - cfg.started:.0f} s")
    return results


@dataclass
class Simulated:
    results: dict              # every task's result by key
    best: dict                 # optimize's result per deployment (seed 0)
    plan: dict                 # the measured splits (best_vs_best.measured)
    regime_load: dict          # regime.choose
    loads: dict                # common_load.loads
    ladder: dict               # regime.ladder_plan
    walls: dict                # worker seconds by task kind (optimize: its wall time)
    sizes: dict | None = None  # full only: sizes_check.search (other instance sizes, seed 0)


def simulate_all(out: Path, cfg: Settings) -> Simulated:
    """Three stages on one executor: each deployment's best split (optimize, seed 0); every
    simulation that needs no measured capacity; then the regime runs and the common loads, whose
    loads come from the capacities the second stage measured."""
    from pddbench.report.optimize_figure import optimize_figure
    from pddbench.sweep.executors import make_executor

    walls: dict[str, float] = {}
    with make_executor(cfg.jobs, cfg.ray) as ex:
        t0 = time.perf_counter()
        # the splits are ranked on the trace and resolution the verdicts' capacities use
        scen = {n: _variant(n, 0, cfg, [f"workload.synth.requests={cfg.capacity_requests}"]) for n in bvb.BUDGETS}
        best = bvb.search(scen, ex, cfg.capacity_iterations,
                          lambda m: console.print(f"  split search: {m}", highlight=False))
        walls["optimize (wall)"] = time.perf_counter() - t0
        for name, res in best.items():
            write_json(out / "optimize" / name / "optimize.json", res)
            optimize_figure(res, out / "optimize" / name / "optimize.png")
        plan = bvb.measured(best, scen)
        sizes = None
        if cfg.full:
            t0 = time.perf_counter()
            sizes = sizes_check.search(scen, ex, cfg.capacity_iterations,
                                       lambda m: console.print(f"  sizes 4-16: {m}", highlight=False))
            walls["sizes check (wall)"] = time.perf_counter() - t0
            for name, res in sizes.pop("results").items():
                write_json(out / "sizes" / name / "optimize.json", res)
                optimize_figure(res, out / "sizes" / name / "optimize.png")
        console.print("  best splits: " + "; ".join(f"{n} {p['label']}" for n, p in plan.items()), highlight=False)
        results = run_tasks(out, cfg, build_tasks(out, cfg, plan, searched_rate_scales(best, plan)), ex, walls)
        fill_reused(results, best, plan, cfg)
        for _ in range(cfg.capacity_doublings):
            moved = unconverged(results, plan)
            if not moved:
                break
            console.print(f"  not converged on {cfg.capacity_requests:,} requests: {', '.join(moved)}; searching again "
                          f"on twice the requests", highlight=False)
            results.update(run_tasks(out, cfg, doubled_tasks(results, cfg, plan, moved), ex, walls))
            fill_reused(results, best, plan, cfg, only_copies=True)
        per_seed = lambda kind, n: [results[k]["capacity"] for k in sorted(k for k in results if k[:2] == (kind, n))]
        line_rps = regime_line_capacities(cfg, results)
        regime_load = regime.choose({n: per_seed("regime_capacity", n) for n in regime.MEASURED}, line_rps)
        ladder = regime.ladder_plan(per_seed("regime_capacity", regime.MEASURED[0]), line_rps,
                                    _variant("regime-cross-dc-pd", 0, cfg).network.wan_lines)
        loads = common_load.loads({n: per_seed("capacity", n) for n in COMMON},
                                  common_load.FULL_FRACTIONS if cfg.full else common_load.LIGHT_FRACTIONS)
        console.print(f"  {regime_load['text']}; common loads {loads['loads_rps']} req/s", highlight=False)
        results.update(run_tasks(out, cfg, dependent_tasks(cfg, plan, results, regime_load, loads, ladder), ex, walls))
    console.print(f"  worker seconds by kind: { {k: round(v, 1) for k, v in walls.items()} }")
    return Simulated(results, best, plan, regime_load, loads, ladder, walls, sizes)
