"""`make nightly` (python -m pddbench.gate.nightly): the nightly suite in one command.

Parts (scenarios/gate/nightly.yaml says what each runs):
- sim: the paper's scenarios in the simulator, exact gate against the shipped baselines;
- bench: pytest-benchmark against the stored baseline of this machine kind (fails at a 20% slowdown);
- live: short live runs on the tiny model with repeats, statistical gate (needs vLLM; PDD needs root);
- fidelity: calibrated live runs of same-DC PD, cross-DC PD and PDD (repeats), each against its
  simulated twin, `pddbench fidelity --max-error-pct`.
Writes OUT/nightly.md (what moved, with history figures of the moved metrics), OUT/junit.xml and
OUT/nightly.json; exits 1 on any regression or failed part, 2 on bad input. --update-baselines
accepts every candidate as the new baseline (creating missing ones): review `git diff
results/baselines` and commit."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import yaml

from pddbench.errors import UserError
from pddbench.gate.gate import copy_inputs, gate
from pddbench.gate.report import junit, markdown
from pddbench.io import write_json, write_text

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPO / "scenarios" / "gate" / "nightly.yaml"
PARTS = ("sim", "bench", "live", "fidelity")
BENCH_FLAGS = ["--benchmark-enable", "--benchmark-autosave", "--benchmark-compare=0001"]


class Suite:
    def __init__(self, out: Path, baselines: Path, history: Path, update: bool, lock: str | None):
        self.out, self.baselines, self.history, self.update, self.lock = out, baselines, history, update, lock
        self.results: list[dict] = []
        self.cases: list[dict] = []
        self.parts: list[dict] = []

    def case(self, suite: str, name: str, failure: str | None = None, output: str = "", skipped: str | None = None):
        self.cases.append({"suite": suite, "name": name, "failure": failure, "output": output, "skipped": skipped})

    def locked(self) -> list[str]:
        """The prefix that holds the lock around a command (live runs, benchmarks), if one is set."""
        return ["flock", self.lock] if self.lock and shutil.which("flock") else []

    def pddbench(self, *args: str, live: bool = False) -> subprocess.CompletedProcess:
        cmd = [*(self.locked() if live else []), sys.executable, "-m", "pddbench", *map(str, args)]
        return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)

    def gate_against(self, name: str, cand: Path, base: Path, required: bool = True) -> None:
        """Gate `cand` against `base`; a missing baseline fails (shipped ones) or is skipped with
        the reason (`required=False`: live baselines belong to one machine kind)."""
        if not base.exists():
            if self.update:
                copy_inputs(cand, base)
                self.case("baselines", name, output=f"created baseline {base} from {cand}")
            else:
                why = (f"no baseline at {base}: run `make nightly NIGHTLY_ARGS=--update-baselines` on this "
                       "machine kind once, review and commit results/baselines")
                self.case("baselines", name, failure=why if required else None, skipped=None if required else why)
            return
        try:
            res = gate(cand, base, update_baseline=self.update, history_dir=self.history, name=name)
        except UserError as exc:
            self.case("gate", name, failure=str(exc))
            return
        self.results.append(res)


def _tail(text: str, n: int = 3000) -> str:
    return text[-n:]


def part_sim(s: Suite, cfg: dict) -> None:
    from pddbench.runner import run_scenario

    for ref in cfg["scenarios"]:
        stem = Path(ref).name
        cand = s.out / "sim" / stem
        run_scenario(Path(ref), list(cfg.get("overrides", [])), s.out, cand)
        s.gate_against(f"sim/{stem}", cand, s.baselines / "sim" / stem)


def part_bench(s: Suite, cfg: dict) -> None:
    base = s.baselines / "bench"
    gated = [str(REPO / "benchmarks" / f) for f in cfg.get("gated", [])] or [str(REPO / "benchmarks")]
    pytest = [*s.locked(), sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *gated]
    if s.update or not base.exists():
        if not s.update:
            s.case("bench", "benchmarks", failure=f"no benchmark baseline at {base}: make bench-baseline")
            return
        shutil.rmtree(base, ignore_errors=True)
        res = subprocess.run([*pytest, "--benchmark-enable", f"--benchmark-storage=file://{base}",
                              "--benchmark-save=baseline"], capture_output=True, text=True, cwd=REPO)
        s.case("bench", "benchmarks", None if res.returncode == 0 else "saving the baseline failed",
               _tail(res.stdout + res.stderr))
        return
    store = s.out / "bench-storage"
    shutil.copytree(base, store, dirs_exist_ok=True)
    res = subprocess.run([*pytest, *BENCH_FLAGS, f"--benchmark-storage=file://{store}",
                          f"--benchmark-compare-fail={cfg.get('compare_fail', 'min:20%')}"],
                         capture_output=True, text=True, cwd=REPO)
    text = res.stdout + res.stderr
    write_text(s.out / "bench.txt", text)
    failure = None if res.returncode == 0 else (
        "benchmark slower than the stored baseline beyond " + cfg.get("compare_fail", "min:20%")
        if "Performance has regressed" in text else f"benchmarks failed (exit {res.returncode})")
    cpus = bench_cpus(base, store)
    if failure and len(cpus) == 2 and cpus[0] != cpus[1]:
        # as the live gate: timings do not compare across CPUs (pytest-benchmark keys its store by OS
        # and Python only), so a slower result on another CPU is not a regression of the code
        failure = (f"benchmark baseline measured on {cpus[0]!r}, this host is {cpus[1]!r}: timings do not compare "
                   "across CPUs; make a baseline here (make nightly NIGHTLY_ARGS='--update-baselines --only bench')")
    s.case("bench", "benchmarks", failure, _tail(text))


def bench_cpus(base: Path, store: Path) -> list[str]:
    """The CPU brand of the stored baseline and of the run just saved beside it in `store`
    (pytest-benchmark's machine_info); fewer than two when either is missing."""
    def brand(path: Path) -> str | None:
        try:
            return json.loads(path.read_text())["machine_info"]["cpu"]["brand_raw"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    baseline = {p.name for p in base.rglob("*.json")}
    runs = sorted(store.rglob("*.json"), key=lambda p: p.name)
    old = next((brand(p) for p in runs if p.name in baseline), None)
    new = next((brand(p) for p in reversed(runs) if p.name not in baseline), None)
    return [b for b in (old, new) if b is not None]


def _live_ready(needs_root: bool) -> str | None:
    from pddbench.live.engines import vllm_available

    if not vllm_available():
        return "vLLM is not installed (make test installs it)"
    if needs_root and os.geteuid() != 0:
        return "needs root (network namespaces)"
    return None


def _live_runs(s: Suite, part: str, cfg: dict, folder: str, repeats: int) -> Iterator[tuple[str, dict, Path]]:
    """Run each of the part's live scenarios (its overrides after the part's, `repeats` unless the
    entry says otherwise) under the live lock; yields (name, entry, run folder) for those that ran,
    recording a skip or a failed run as the part's case."""
    for name, entry in cfg["scenarios"].items():
        why = _live_ready(bool(entry.get("needs_root")))
        if why:
            s.case(part, name, skipped=why)
            continue
        run = s.out / folder / name
        sets = [x for o in [*cfg.get("overrides", []), *entry.get("overrides", [])] for x in ("--set", o)]
        n = entry.get("repeats", cfg.get("repeats", repeats))
        res = s.pddbench("run", entry["scenario"], *sets, *(["--repeat", str(n)] if n > 1 else []), "--out", run,
                         live=True)
        if res.returncode != 0:
            s.case(part, name, failure=f"live run failed (exit {res.returncode})", output=_tail(res.stderr))
            continue
        yield name, entry, run


def part_live(s: Suite, cfg: dict) -> None:
    for name, _, run in _live_runs(s, "live", cfg, "live", repeats=3):
        s.gate_against(f"live/{name}", run, s.baselines / "live" / name, required=False)


def part_fidelity(s: Suite, cfg: dict) -> None:
    """Each deployment's calibrated live run (with repeats) against its simulated twin: `pddbench
    fidelity --max-error-pct` fails the case when a TTFT percentile's error is beyond the bound."""
    for name, entry, run in _live_runs(s, "fidelity", cfg, "fidelity-run", repeats=1):
        bound = entry.get("max_error_pct", cfg["max_error_pct"])
        res = s.pddbench("fidelity", run, "--max-error-pct", str(bound), "--out", s.out / "fidelity" / name)
        failure = None if res.returncode == 0 else (
            f"TTFT error beyond {bound}%" if res.returncode == 1 else f"fidelity failed (exit {res.returncode})")
        s.case("fidelity", f"{name}: TTFT error within {bound}%", failure, _tail(res.stdout + res.stderr))


RUNNERS = {"sim": part_sim, "bench": part_bench, "live": part_live, "fidelity": part_fidelity}


def _figures(s: Suite) -> None:
    """History figures of every ruled metric that moved, linked from the report."""
    from pddbench.gate.history import plot_history

    moved = sorted({r["metric"] for res in s.results for r in res["rows"]
                    if r["rule"] and r["status"] in ("regression", "within", "improved")})
    if not moved or not (s.history / "gate_history.parquet").is_file():
        return
    paths = {p.name: p for p in plot_history(s.history, moved, s.out / "figures")}
    for res in s.results:
        names = sorted({r["metric"] for r in res["rows"] if r["rule"] and r["status"] in ("regression", "within",
                                                                                          "improved")})
        res["figures"] = [{"metric": m, "path": os.path.relpath(paths[n], s.out)} for m in names
                          for n in paths if n == f"history-{m.replace('/', '_')}.png"]


def nightly(config: Path, out: Path, only: list[str], update: bool, lock: str | None, history: Path | None) -> int:
    cfg = yaml.safe_load(config.read_text())
    out.mkdir(parents=True, exist_ok=False)
    s = Suite(out, REPO / cfg["baselines"], history or out / "history", update, lock)
    started = time.monotonic()
    for part in only or PARTS:
        t0 = time.monotonic()
        n_cases, n_results = len(s.cases), len(s.results)
        try:
            RUNNERS[part](s, cfg[part])
        except UserError as exc:
            s.case(part, part, failure=str(exc))
        fails = sum(1 for c in s.cases[n_cases:] if c["failure"]) + \
            sum(1 for r in s.results[n_results:] if r["regressions"] and not r["accepted"])
        s.parts.append({"part": part, "seconds": round(time.monotonic() - t0, 1), "failures": fails})
        print(f"nightly: {part} done in {s.parts[-1]['seconds']} s, {fails} failure(s)", file=sys.stderr, flush=True)
    _figures(s)
    total = round(time.monotonic() - started, 1)
    failed = sum(p["failures"] for p in s.parts)
    head = [f"Run {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC in {total / 60:.1f} min; "
            f"{'FAILED' if failed else 'passed'}" + (" (baselines updated)" if update else ""), "",
            "| part | time | failures |", "| --- | ---: | ---: |"]
    head += [f"| {p['part']} | {p['seconds'] / 60:.1f} min | {p['failures']} |" for p in s.parts]
    other = [f"- {c['suite']} / {c['name']}: " + ("FAIL: " + c["failure"] if c["failure"] else
                                                    "skipped: " + c["skipped"] if c["skipped"] else
                                                    "ok" + (f" ({c['output']})" if 0 < len(c["output"]) < 200 else ""))
             for c in s.cases]
    md = markdown(s.results, "pddbench nightly").replace("# pddbench nightly\n", "# pddbench nightly\n\n" +
                                                         "\n".join(head + [""] + other) + "\n", 1)
    write_text(out / "nightly.md", md)
    write_text(out / "junit.xml", junit(s.results, s.cases))
    write_json(out / "nightly.json", {"parts": s.parts, "seconds": total, "results": s.results, "cases": s.cases})
    print(f"nightly: {'FAILED' if failed else 'passed'} in {total / 60:.1f} min; report {out / 'nightly.md'}",
          file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m pddbench.gate.nightly", description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    ap.add_argument("--out", type=Path, default=None, help="report folder (default results/nightly/<stamp>)")
    ap.add_argument("--only", action="append", choices=PARTS, default=[], help="run only these parts (repeatable)")
    ap.add_argument("--update-baselines", action="store_true", help="accept every candidate as the new baseline")
    ap.add_argument("--live-lock", default=None, help="flock this file around each live run and the benchmarks")
    ap.add_argument("--history", type=Path, default=REPO / "results" / "history")
    a = ap.parse_args(argv)
    out = a.out or REPO / "results" / "nightly" / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    try:
        sys.exit(nightly(a.config, out, a.only, a.update_baselines, a.live_lock, a.history))
    except (UserError, FileExistsError, KeyError, yaml.YAMLError) as exc:
        print(f"error: nightly: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
