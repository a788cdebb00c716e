"""`make nightly` (python -m pddbench.gate.nightly): the nightly suite in one command.

Parts (scenarios/gate/nightly.yaml says what each runs):
- sim: the paper's scenarios in the simulator, exact gate against the shipped baselines
  (BASELINES/sim/<scenario>/: one for every host, the simulator being deterministic);
- bench: pytest-benchmark's gated hot loops against this host's own baseline, each timed beside a
  yardstick (a fixed Python loop, pddbench/gate/yardstick.py); fails when a min relative to its
  yardstick is max_slowdown_pct (20) slower than the baseline's (absolute timings on one host key
  moved 2x between VM boots), BASELINES/bench/<host-key>/<machine>/0001_baseline.json (<machine>: pytest-benchmark's
  OS/Python id); `python -m pddbench.gate.nightly bench` runs this part alone (make bench);
- live: short live runs on the tiny model with repeats, statistical gate (needs vLLM; PDD needs root)
  against this host's own baseline, BASELINES/live/<host-key>/<scenario>/;
- fidelity: calibrated live runs of same-DC PD, cross-DC PD and PDD (repeats), each against its
  simulated twin (`pddbench fidelity`), gated against this host's own recorded fidelity,
  BASELINES/fidelity/<host-key>/<deployment>/;
- agreement: `pddbench reproduce` (light, what make run runs) and `pddbench reproduce --full`, each
  on its own; fails when a ledger row's verdict differs between them (the light mode may be lighter
  only where it changes no verdict: pddbench/reproduce/agreement.py). No baseline: the two runs are
  each other's reference.

Baselines per host. Live figures and the twin's error depend on the CPU (vLLM CPU without AVX-512
runs ~10x slower), and so do benchmark timings, so live, fidelity and bench baselines are kept per
host. The host key (`host_key`) is made from the hardware fields the gate already compares
(pddbench.gate.gate.HARDWARE: CPU model, instruction-set level, cores, as
pddbench.core.provenance.cpu_info records them), taken from the run's own recorded provenance (for the
benchmarks, which record none: this host's cpu_info; a saved benchmark run's machine_info maps to
the same key, `bench_provenance`), e.g. `amd-epyc-avx2-2cpus`: two runs get one key exactly when
the gate would call them the same hardware.

Record or compare (`plan`): where a part has no baseline yet (no folder, or an empty one) the run is
recorded as the baseline, the output and nightly.md say "baseline recorded for <host>, nothing
compared", and that case passes; where one exists, the run is compared with it; with
--update-baselines the run is compared and then accepted as the new baseline (review `git diff
results/baselines` and commit).

Fidelity rule (`fidelity_rows`): for each gated TTFT percentile q (nightly.yaml `percentiles`),
recorded = |error_pct| of q in the baseline's fidelity.json, spread = half the width of its
bootstrap interval (`error_pct_ci`: over repeats, then requests, so run-to-run spread is in it),
current = |error_pct| of q now. A regression is current > recorded + spread + margin_pct
(nightly.yaml, 10 percentage points): the twin got further from the live run than the host's own
recorded error and its noise allow. A smaller error passes (accept it with --update-baselines). A
baseline recorded with other settings (scenario, overrides, repeats) is not compared: the case
fails and says to accept the new settings with --update-baselines.

Writes OUT/nightly.md (what moved, with history figures of the moved metrics), OUT/junit.xml and
OUT/nightly.json; exits 1 on any regression or failed part, 2 on bad input."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from pddbench.core.errors import UserError
from pddbench.gate.gate import HARDWARE, copy_inputs, gate
from pddbench.gate.report import junit, markdown
from pddbench.core.io import write_json, write_text
from pddbench.core.loading import load_yaml, read_json

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPO / "scenarios" / "gate" / "nightly.yaml"
PARTS = ("sim", "bench", "live", "fidelity", "agreement")
BENCH_TIMER = "time.process_time"  # as the yardstick's (pddbench/gate/yardstick.py)
BENCH_BASELINE = "0001_baseline.json"  # a benchmark baseline: the run pytest-benchmark compares with (--compare=0001)
SIM_HOSTS = "every host (the simulator is deterministic)"  # whom a sim baseline is for
FIDELITY_FILES = ("fidelity.json", "fidelity.csv")  # what a fidelity baseline keeps of the command's output
SETTINGS = "settings.json"  # beside a fidelity baseline: how the live run was made


def host_key(prov: dict | None) -> str:
    """A folder name for the hardware in `prov` (a run's provenance): the gate's HARDWARE fields in
    order, lower-cased and reduced to [a-z0-9-], e.g. {'cpu_model': 'AMD EPYC', 'cpu_isa': 'avx2',
    'cpu_cores': 2} -> 'amd-epyc-avx2-2cpus'. A missing field reads 'unknown'."""
    prov = prov or {}

    def slug(value) -> str:
        text = re.sub(r"\((r|tm|c)\)", " ", str(value).lower())  # Intel(R) Xeon(R) -> intel xeon
        return re.sub(r"[^a-z0-9]+", "-", text).strip("-") or "unknown"

    parts = []
    for field in HARDWARE:
        value = prov.get(field)
        part = "unknown" if value is None or value == "" else slug(value)
        parts.append(f"{part}cpus" if field == "cpu_cores" else part)
    return "-".join(parts)


def run_provenance(run: Path) -> dict:
    """The provenance a run folder (or repeat folder) recorded; this host's when it recorded none."""
    for name in ("repeats.json", "summary.json"):
        if (run / name).is_file():
            prov = read_json(run / name, "run file")
            prov = prov.get("provenance") if isinstance(prov, dict) else None
            if isinstance(prov, dict):
                return prov
    from pddbench.core.provenance import provenance

    return provenance()


def plan(base: Path, update: bool) -> str:
    """What to do with a part's baseline folder: 'record' the run as the baseline (no folder, or an
    empty one: this host's first nightly), 'compare' with it, or 'update' (compare, then accept the
    run as the new baseline: --update-baselines)."""
    if base.is_file():
        raise UserError(f"{base} is a file; a baseline is a folder: remove it")
    if not base.is_dir() or not any(base.iterdir()):
        return "record"
    return "update" if update else "compare"


def recorded_line(where: str, base: Path) -> str:
    return f"baseline recorded for {where}, nothing compared: {base}"


def _write_host_file(host_dir: Path, host: str, prov: dict) -> None:
    """host.json in a new host folder: which hardware the key stands for (for a reader)."""
    if not (host_dir / "host.json").is_file():
        write_json(host_dir / "host.json", {"host": host, **{k: prov.get(k) for k in (*HARDWARE, "machine")}})


def _swap_in(tmp: Path, base: Path) -> None:
    """Move a complete new baseline folder `tmp` to `base` (replacing an old one only once the new
    one is whole), so an interrupted nightly never leaves half a baseline behind."""
    old = base.parent / f".{base.name}.old-{os.getpid()}"
    if base.exists():
        os.replace(base, old)
    try:
        os.replace(tmp, base)
    except OSError:
        if old.exists():
            os.replace(old, base)
        raise
    shutil.rmtree(old, ignore_errors=True)


def record_run(cand: Path, base: Path) -> None:
    """A new baseline folder from a run folder: its gate inputs only (gate.copy_inputs)."""
    base.parent.mkdir(parents=True, exist_ok=True)
    tmp = base.parent / f".{base.name}.new-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        copy_inputs(cand, tmp)
        _swap_in(tmp, base)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def record_fidelity(fid: Path, base: Path, settings: dict) -> None:
    """A fidelity baseline: the command's fidelity.json (+ .csv) and the settings of its live run."""
    base.parent.mkdir(parents=True, exist_ok=True)
    tmp = base.parent / f".{base.name}.new-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        for name in FIDELITY_FILES:
            if (fid / name).is_file():
                shutil.copy2(fid / name, tmp / name)
        write_json(tmp / SETTINGS, settings)
        _swap_in(tmp, base)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _error_rows(doc, path: Path) -> dict[int, dict]:
    """fidelity.json's TTFT rows by percentile, each with a finite error_pct and error_pct_ci."""
    rows = doc.get("ttft") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        raise UserError(f"{path}: no 'ttft' list (not written by `pddbench fidelity`)")
    out = {}
    for i, row in enumerate(rows):
        ci = row.get("error_pct_ci") if isinstance(row, dict) else None
        ok = isinstance(row, dict) and isinstance(row.get("percentile"), (int, float)) and \
            isinstance(ci, list) and len(ci) == 2 and \
            all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in (row.get("error_pct"), *ci))
        if not ok:
            raise UserError(f"{path}: ttft[{i}] needs a percentile, a finite error_pct and a two-number "
                            "error_pct_ci; rerun `pddbench fidelity`")
        out[int(row["percentile"])] = row
    return out


def fidelity_rows(base_doc: dict, cand_doc: dict, percentiles: list[int], margin_pct: float,
                  base_path: Path = Path("baseline"), cand_path: Path = Path("candidate")) -> list[dict]:
    """The fidelity rule, one row per gated percentile: regression when the current |error| exceeds
    the recorded |error| + the recorded interval's half-width + `margin_pct` (percentage points)."""
    base, cand = _error_rows(base_doc, base_path), _error_rows(cand_doc, cand_path)
    rows = []
    for q in percentiles:
        for table, path in ((base, base_path), (cand, cand_path)):
            if q not in table:
                raise UserError(f"{path}: no TTFT p{q} row; gated percentiles are nightly.yaml fidelity.percentiles")
        b, c = base[q], cand[q]
        recorded, current = abs(b["error_pct"]), abs(c["error_pct"])
        spread = abs(b["error_pct_ci"][1] - b["error_pct_ci"][0]) / 2
        limit = recorded + spread + margin_pct
        status = "regression" if current > limit else "improved" if current < recorded else "within"
        rows.append({"percentile": q, "recorded_error_pct": b["error_pct"], "recorded_spread_pct": spread,
                     "current_error_pct": c["error_pct"], "limit_abs_error_pct": limit, "status": status})
    return rows


def fidelity_table(rows: list[dict]) -> str:
    """One line per gated percentile: the error now, the recorded one with its spread, the limit."""
    return "\n".join(f"p{r['percentile']}: error {r['current_error_pct']:+.1f}% (recorded "
                     f"{r['recorded_error_pct']:+.1f}% +/- {r['recorded_spread_pct']:.1f}; limit |error| "
                     f"{r['limit_abs_error_pct']:.1f}%): {r['status']}" for r in rows)


class Suite:
    def __init__(self, out: Path, baselines: Path, history: Path, update: bool, lock: str | None):
        self.out, self.baselines, self.history, self.update, self.lock = out, baselines, history, update, lock
        self.results: list[dict] = []
        self.cases: list[dict] = []
        self.parts: list[dict] = []
        self.recorded: list[str] = []  # "baseline recorded for ..." lines, at the top of nightly.md
        self.sections: list[str] = []  # extra markdown (the fidelity tables)

    def case(self, suite: str, name: str, failure: str | None = None, output: str = "", skipped: str | None = None):
        self.cases.append({"suite": suite, "name": name, "failure": failure, "output": output, "skipped": skipped})

    def locked(self) -> list[str]:
        """The prefix that holds the lock around a command (live runs, benchmarks), if one is set."""
        return ["flock", self.lock] if self.lock and shutil.which("flock") else []

    def pddbench(self, *args: str, live: bool = False) -> subprocess.CompletedProcess:
        cmd = [*(self.locked() if live else []), sys.executable, "-m", "pddbench", *map(str, args)]
        return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)

    def note_recorded(self, name: str, where: str, base: Path, prov: dict | None) -> None:
        if prov is not None:  # a per-host folder: say which hardware its key stands for
            _write_host_file(base.parent, where, prov)
        line = recorded_line(where, base)
        self.recorded.append(f"{name}: {line}")
        self.case("baselines", name, output=line)
        print(f"nightly: {name}: {line}", file=sys.stderr, flush=True)

    def gate_against(self, name: str, cand: Path, base: Path, where: str, prov: dict | None = None) -> None:
        """Gate `cand` against `base`, or record it there when this is the first run (`plan`);
        `where`: whom the baseline is for (a host key, or every host); `prov`: the run's
        provenance, for a per-host baseline."""
        if plan(base, self.update) == "record":
            record_run(cand, base)
            self.note_recorded(name, where, base, prov)
            return
        try:
            res = gate(cand, base, update_baseline=self.update, history_dir=self.history, name=name)
        except UserError as exc:
            self.case("gate", name, failure=str(exc))
            return
        self.results.append(res)

    def gate_fidelity(self, name: str, fid: Path, base: Path, host: str, settings: dict, cfg: dict,
                      prov: dict | None = None) -> None:
        """The fidelity rule for one deployment: `fid` (the command's output folder) against the
        host's recorded fidelity at `base`; records it there when there is none."""
        percentiles, margin = fidelity_rule(cfg)
        title = f"{name}: TTFT error within this host's recorded error + spread + {margin:g} points"
        try:
            cand = read_json(fid / "fidelity.json", "fidelity result")
            _error_rows(cand, fid / "fidelity.json")  # never record (or compare) what the rule cannot read
            action = plan(base, self.update)
        except UserError as exc:
            self.case("fidelity", title, failure=str(exc))
            return
        if action == "record":
            record_fidelity(fid, base, settings)
            self.note_recorded(f"fidelity/{name}", host, base, prov)
            return
        try:
            was = read_json(base / SETTINGS, "fidelity baseline settings")
            if was != settings and action != "update":
                self.case("fidelity", title, failure=(
                    f"{base} was recorded with other settings ({json.dumps(was, sort_keys=True)}; now "
                    f"{json.dumps(settings, sort_keys=True)}): errors at another load do not compare; accept the "
                    "new settings with --update-baselines"))
                return
            rows = fidelity_rows(read_json(base / "fidelity.json", "fidelity baseline"), cand, percentiles, margin,
                                 base / "fidelity.json", fid / "fidelity.json")
            table = fidelity_table(rows)
        except UserError as exc:
            if action != "update":
                self.case("fidelity", title, failure=str(exc))
                return
            rows, table = [], f"the old baseline could not be compared ({exc})"  # --update-baselines replaces it
        bad = [f"p{r['percentile']}" for r in rows if r["status"] == "regression"]
        failure = None
        if action == "update":
            record_fidelity(fid, base, settings)
            table += f"\naccepted as the new baseline ({base})"
        elif bad:
            failure = (f"TTFT error worse than this host's recorded one beyond its spread + {margin:g} points at "
                       f"{', '.join(bad)} (baseline {base})")
        self.case("fidelity", title, failure, table)
        self.sections.append(f"## fidelity/{name} ({host}): {'FAIL' if failure else 'PASS'}\n\n"
                             + "\n".join(f"- {line}" for line in table.splitlines()) + "\n")


def fidelity_rule(cfg: dict) -> tuple[list[int], float]:
    """The fidelity part's gated percentiles and margin (nightly.yaml fidelity.percentiles, .margin_pct)."""
    from pddbench.measure.fidelity import PERCENTILES

    qs, margin = cfg.get("percentiles", [10, 50, 90, 99]), cfg.get("margin_pct", 10)
    if not isinstance(qs, list) or not qs or any(q not in PERCENTILES or isinstance(q, bool) for q in qs):
        raise UserError(f"nightly config fidelity.percentiles: {qs!r}; give a list of "
                        f"{', '.join(map(str, PERCENTILES))} (what `pddbench fidelity` reports)")
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < 1000:
        raise UserError(f"nightly config fidelity.margin_pct: {margin!r}; give percentage points, e.g. 10")
    return [int(q) for q in qs], float(margin)


def _tail(text: str, n: int = 3000) -> str:
    return text[-n:]


def part_sim(s: Suite, cfg: dict) -> None:
    from pddbench.measure.runner import run_scenario

    for ref in cfg["scenarios"]:
        stem = Path(ref).name
        cand = s.out / "sim" / stem
        run_scenario(Path(ref), list(cfg.get("overrides", [])), s.out, cand)
        s.gate_against(f"sim/{stem}", cand, s.baselines / "sim" / stem, SIM_HOSTS)


def bench_provenance(machine_info) -> dict:
    """The gate's HARDWARE fields of a saved pytest-benchmark run (its `machine_info`: py-cpuinfo's
    brand_raw, which on Linux is /proc/cpuinfo's model name, flags and count), so `host_key` names
    the host of a benchmark baseline as it names a live run's."""
    from pddbench.core.provenance import isa_level

    info = machine_info if isinstance(machine_info, dict) else {}
    cpu = info.get("cpu") if isinstance(info.get("cpu"), dict) else {}
    flags = cpu.get("flags") if isinstance(cpu.get("flags"), list) else []
    return {"cpu_model": cpu.get("brand_raw") or None, "cpu_isa": isa_level(flags), "cpu_cores": cpu.get("count"),
            "machine": info.get("machine")}


def this_hardware() -> dict:
    """This host's CPU fields (as every run's provenance records them): whom a benchmark run is for."""
    from pddbench.core.provenance import cpu_info

    return cpu_info()


def bench_machine() -> str:
    """pytest-benchmark's machine id (OS, Python implementation and version, bits): the folder it
    saves runs in and looks for the baseline in, under a storage root."""
    try:
        from pytest_benchmark.utils import get_machine_id
    except ImportError:
        raise UserError("pytest-benchmark is not installed: `make setup` installs it (the dev extra)") from None
    return get_machine_id()


def bench_cfg(cfg: dict) -> tuple[list[str], float]:
    """The benchmark files whose results are gated (nightly.yaml bench.gated, under benchmarks/)
    and the largest slowdown relative to the yardstick that passes (bench.max_slowdown_pct)."""
    gated, pct = cfg.get("gated", []), cfg.get("max_slowdown_pct", 20)
    if not isinstance(gated, list) or not gated or not all(isinstance(f, str) and f for f in gated):
        raise UserError(f"nightly config bench.gated: {gated!r}; give a list of files under benchmarks/")
    if "compare_fail" in cfg:
        raise UserError("nightly config bench.compare_fail: gone; benchmarks are gated relative to the yardstick, "
                        "give bench.max_slowdown_pct (e.g. 20)")
    if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not math.isfinite(pct) or pct <= 0:
        raise UserError(f"nightly config bench.max_slowdown_pct: {pct!r}; give a positive number of percent, e.g. 20")
    for f in gated:
        if not (REPO / "benchmarks" / f).is_file():
            raise UserError(f"nightly config bench.gated: no benchmarks/{f}; name files under benchmarks/")
    return gated, float(pct)


def _pytest(cmd: list[str], echo: bool) -> tuple[int, str]:
    """Run pytest; its output, echoed line by line as it comes when `echo` (make bench)."""
    if not echo:
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        return res.returncode, res.stdout + res.stderr
    lines = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO) as proc:
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line)
    return proc.returncode, "".join(lines)


def record_bench(run: Path, base: Path, gated: list[str]) -> None:
    """A benchmark baseline from a saved run (pytest-benchmark's JSON): the gated files' benchmarks
    only (the others run one round each: too noisy to gate), as base/BENCH_BASELINE."""
    doc = read_json(run, "saved benchmark run")
    files = {f"benchmarks/{f}" for f in gated}
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise UserError(f"{run}: no 'benchmarks' list (not saved by pytest-benchmark)")
    kept = [b for b in doc["benchmarks"] if isinstance(b, dict) and str(b.get("fullname", "")).split("::")[0] in files]
    if not kept:
        raise UserError(f"{run}: none of the gated benchmarks ({', '.join(sorted(files))}) ran; nothing recorded")
    base.parent.mkdir(parents=True, exist_ok=True)
    tmp = base.parent / f".{base.name}.new-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        write_json(tmp / BENCH_BASELINE, {**doc, "benchmarks": kept})
        _swap_in(tmp, base)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _bench_names(run: Path, gated: list[str]) -> set[str]:
    """The gated benchmarks' full names in a saved run (none where it is unreadable)."""
    files = {f"benchmarks/{f}" for f in gated}
    try:
        doc = read_json(run, "saved benchmark run")
        return {b["fullname"] for b in doc["benchmarks"] if str(b["fullname"]).split("::")[0] in files}
    except (UserError, KeyError, TypeError):
        return set()


def _readable(path: Path) -> bool:
    try:
        read_json(path, "benchmark baseline")
        return True
    except UserError:
        return False


def run_bench(baselines: Path, store: Path, cfg: dict, update: bool, prefix: list[str] | None = None,
              paths: list[str] | None = None, echo: bool = False) -> dict:
    """The benchmarks against this host's baseline, BASELINES/bench/<host-key>/<machine>/ (host key
    as for live baselines, from this host's CPU fields; <machine>: pytest-benchmark's OS/Python id,
    as timings move with the Python too). Record or compare as `plan` says: no baseline, the run is
    recorded (the gated benchmarks only) and passes; else compared relative to the yardstick
    (`compare_bench`); with `update`, shown compared and then accepted. `store`: a new folder, where
    pytest-benchmark saves the run (beside a copy of the baseline, for its own table); `paths`: what pytest runs
    (default: the gated files). Returns action, host, base, failure (None: passed), output."""
    gated, pct = bench_cfg(cfg)
    if store.exists() and (not store.is_dir() or any(store.iterdir())):
        raise UserError(f"{store}: the benchmark store must be a new (or empty) folder; give another --out")
    hardware = this_hardware()
    host = host_key(hardware)
    base = baselines / "bench" / host / bench_machine()
    action = plan(base, update)
    out = {"action": action, "host": host, "base": base, "hardware": hardware, "failure": None, "output": ""}
    if action == "compare" and not _readable(base / BENCH_BASELINE):
        out["failure"] = (f"{base} holds no readable {BENCH_BASELINE}: remove the folder (the next run records "
                          "one) or accept this run with --update-baselines")
        return out
    saved = store / bench_machine()
    saved.mkdir(parents=True, exist_ok=True)
    # pytest-benchmark's 0001 in the store is what it compares with; with update an unreadable old
    # baseline is not compared, only replaced
    primed = action == "compare" or (action == "update" and _readable(base / BENCH_BASELINE))
    if primed:
        shutil.copy2(base / BENCH_BASELINE, saved / BENCH_BASELINE)
    # CPU time, not wall time: on a shared host a long round is preempted by other jobs (a 300 ms
    # round ran +45 % in wall time beside two busy loops), which is the host's load, not the code
    flags = ["--benchmark-enable", f"--benchmark-timer={BENCH_TIMER}", f"--benchmark-storage=file://{store}"]
    flags += ["--benchmark-autosave", "--benchmark-compare=0001"] if primed else ["--benchmark-save=baseline"]
    files = paths or [str(REPO / "benchmarks" / f) for f in gated]
    rc, text = _pytest([*(prefix or []), sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files,
                        *flags], echo)
    out["output"] = text

    def add(more: str) -> None:  # pytest's output was echoed as it came; so is what follows it
        out["output"] += "\n" + more
        if echo:
            print(more, flush=True)
    runs = sorted(p for p in saved.glob("*.json") if not (primed and p.name == BENCH_BASELINE))
    if action == "compare":
        if rc != 0 or not runs:
            out["failure"] = f"benchmarks failed (exit {rc})" if rc != 0 else "pytest-benchmark saved no run"
            return out
        out["failure"], table = compare_bench(base / BENCH_BASELINE, runs[-1], gated, pct)
        add(table)
        if out["failure"] and "slower" in out["failure"]:
            cpus = bench_cpus(base, store)
            if len(cpus) == 2 and cpus[0] != cpus[1]:
                # timings do not compare across CPUs: a baseline filed under the wrong host is not a slowdown
                out["failure"] = (f"benchmark baseline {base} was measured on {cpus[0]!r}, this host is {cpus[1]!r}: "
                                  "timings do not compare across CPUs; replace it with make bench-baseline")
        return out
    if primed and runs:  # update: the comparison is shown, whatever it says
        add(compare_bench(base / BENCH_BASELINE, runs[-1], gated, pct)[1])
    if rc != 0 or not runs:
        out["failure"] = (f"benchmarks failed (exit {rc})" if rc != 0 else "pytest-benchmark saved no run") + \
            f"; nothing {'recorded' if action == 'record' else 'accepted'} at {base}"
        return out
    try:
        record_bench(runs[-1], base, gated)
    except UserError as exc:  # e.g. every gated benchmark skipped: a failed part, not bad input
        out["failure"] = str(exc)
    return out


def compare_bench(base_run: Path, run: Path, gated: list[str], max_slowdown_pct: float) -> tuple[str | None, str]:
    """The gated benchmarks of `run` against the baseline, each as its min relative to the yardstick
    timed beside it (pddbench/gate/yardstick.py); returns (failure or None, the table). A baseline
    without yardstick timings cannot be judged: re-record it (never a pass by default)."""
    from pddbench.gate.yardstick import changes_table, normalised_changes

    names = _bench_names(run, gated)
    rows = normalised_changes(read_json(base_run, "benchmark baseline"), read_json(run, "saved benchmark run"), names)
    text = changes_table(rows, max_slowdown_pct)
    new = names - _bench_names(base_run, gated)
    if new:  # only what both runs hold is compared
        text += f"\nnot in the baseline, not compared: {', '.join(sorted(new))} (accept them with make bench-baseline)"
    unjudged = [r["benchmark"] for r in rows if r["change_pct"] is None]
    if unjudged:
        return (f"no yardstick timing for {', '.join(unjudged)} in the baseline or this run: record the baseline "
                "anew with make bench-baseline (baselines from before the yardstick cannot be compared)"), text
    slower = [r for r in rows if r["change_pct"] > max_slowdown_pct]
    if slower:
        worst = ", ".join(f"{r['benchmark'].split('::')[-1]} {r['change_pct']:+.1f}%" for r in slower)
        return f"benchmark slower relative to the yardstick than +{max_slowdown_pct:g}% ({base_run.parent}): {worst}", text
    return None, text


def part_bench(s: Suite, cfg: dict) -> None:
    """The gated benchmarks against this host's benchmark baseline (`run_bench`)."""
    res = run_bench(s.baselines, s.out / "bench-storage", cfg, s.update, s.locked())
    write_text(s.out / "bench.txt", res["output"])
    if res["action"] == "record" and res["failure"] is None:
        s.note_recorded("bench", res["host"], res["base"], res["hardware"])
        return
    output = _tail(res["output"])
    if res["action"] == "update" and res["failure"] is None:
        output += f"\naccepted as the new baseline ({res['base']})"
    s.case("bench", "benchmarks", res["failure"], output)


def bench_main(argv: list[str]) -> int:
    """`make bench` / `make bench-baseline`: the bench part alone, its run saved under
    results/bench/<stamp>/ (git-ignored), pytest's output shown as it comes."""
    ap = argparse.ArgumentParser(prog="python -m pddbench.gate.nightly bench",
                                 description="benchmarks against this host's baseline (recorded on its first run)")
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    ap.add_argument("--baselines", type=Path, default=None, help="baselines root (default: the config's baselines:)")
    ap.add_argument("--update-baselines", action="store_true", help="compare, then accept the run as the baseline")
    ap.add_argument("--all", action="store_true",
                    help="run every benchmark under benchmarks/ (only the gated ones are compared and recorded)")
    ap.add_argument("--out", type=Path, default=None, help="where the run is saved (default results/bench/<stamp>)")
    a = ap.parse_args(argv)
    cfg = load_config(a.config, ["bench"])
    store = a.out or REPO / "results" / "bench" / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    res = run_bench(a.baselines or REPO / cfg["baselines"], store, cfg["bench"], a.update_baselines,
                    paths=[str(REPO / "benchmarks")] if a.all else None, echo=True)
    if res["action"] == "record" and res["failure"] is None:
        _write_host_file(res["base"].parent, res["host"], res["hardware"])
        msg = recorded_line(res["host"], res["base"]) + " (review and commit it)"
    elif res["failure"]:
        msg = "FAILED: " + res["failure"]
    elif res["action"] == "update":
        msg = f"accepted as the new baseline for {res['host']}: {res['base']} (review git diff and commit it)"
    else:
        msg = f"passed against the baseline for {res['host']}: {res['base']}"
    print(f"bench: {msg}; run saved in {store}", file=sys.stderr)
    return 1 if res["failure"] else 0


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


def live_settings(cfg: dict, entry: dict, repeats: int) -> dict:
    """How a part runs one live scenario: its scenario, overrides (the part's, then the entry's)
    and repeats (the entry's, else the part's, else `repeats`)."""
    return {"scenario": entry["scenario"], "overrides": [*cfg.get("overrides", []), *entry.get("overrides", [])],
            "repeats": int(entry.get("repeats", cfg.get("repeats", repeats)))}


def _live_runs(s: Suite, part: str, cfg: dict, folder: str, repeats: int) -> Iterator[tuple[str, dict, Path]]:
    """Run each of the part's live scenarios (`live_settings`) under the live lock; yields (name,
    settings, run folder) for those that ran, recording a skip or a failed run as the part's case."""
    for name, entry in cfg["scenarios"].items():
        why = _live_ready(bool(entry.get("needs_root")))
        if why:
            s.case(part, name, skipped=why)
            continue
        run = s.out / folder / name
        settings = live_settings(cfg, entry, repeats)
        sets = [x for o in settings["overrides"] for x in ("--set", o)]
        n = settings["repeats"]
        res = s.pddbench("run", settings["scenario"], *sets, *(["--repeat", str(n)] if n > 1 else []), "--out", run,
                         live=True)
        if res.returncode != 0:
            s.case(part, name, failure=f"live run failed (exit {res.returncode})", output=_tail(res.stderr))
            continue
        yield name, settings, run


def part_live(s: Suite, cfg: dict) -> None:
    """Each live scenario's repeats, statistical gate against this host's baseline (recorded on
    the host's first nightly)."""
    for name, _, run in _live_runs(s, "live", cfg, "live", repeats=3):
        prov = run_provenance(run)
        host = host_key(prov)
        s.gate_against(f"live/{name}", run, s.baselines / "live" / host / name, host, prov)


def part_fidelity(s: Suite, cfg: dict) -> None:
    """Each deployment's calibrated live run (with repeats) against its simulated twin (`pddbench
    fidelity`), then that error against this host's recorded one (the rule: module docstring)."""
    fidelity_rule(cfg)  # a bad rule is refused before the live runs (minutes each)
    for name, settings, run in _live_runs(s, "fidelity", cfg, "fidelity-run", repeats=1):
        fid = s.out / "fidelity" / name
        res = s.pddbench("fidelity", run, "--out", fid)
        if res.returncode != 0:
            s.case("fidelity", name, f"fidelity failed (exit {res.returncode})", _tail(res.stdout + res.stderr))
            continue
        write_text(s.out / "fidelity" / f"{name}.txt", res.stdout + res.stderr)
        prov = run_provenance(run)
        host = host_key(prov)
        s.gate_fidelity(name, fid, s.baselines / "fidelity" / host / name, host, settings, cfg, prov)


def part_agreement(s: Suite, cfg: dict) -> None:
    """The light and the full reproduction, then their verdicts row by row (module docstring)."""
    from pddbench.reproduce.agreement import disagreements, table, verdicts

    found = {}
    for mode in ("light", "full"):
        args = cfg.get(mode)
        if not isinstance(args, list) or not all(isinstance(a, (str, int)) for a in args):
            raise UserError(f"nightly config: agreement.{mode}: expected a list of reproduce options, e.g. [--full, -j, 2]")
        folder = s.out / "agreement" / mode
        t0 = time.monotonic()
        res = s.pddbench("reproduce", *args, "--results", folder)
        runs = sorted(folder.glob("reproduce/*/reproduce.json"))
        if res.returncode != 0 or len(runs) != 1:
            s.case("agreement", mode, f"reproduce {' '.join(map(str, args))} failed (exit {res.returncode})",
                   _tail(res.stdout + res.stderr))
            return
        found[mode] = verdicts(runs[0])
        s.case("agreement", mode, output=f"{len(found[mode])} rows in {time.monotonic() - t0:.0f} s")
    diff = disagreements(found["light"], found["full"])
    s.sections.append("## Light against full reproduction (verdict per row)\n\n" + table(found["light"], found["full"]) + "\n")
    s.case("agreement", "verdicts", failure=(f"{len(diff)} row(s) get another verdict in the light run than in the full "
                                             "one: " + "; ".join(f"{d['claim']}: {d['light']} vs {d['full']}" for d in diff))
           if diff else None, output=f"{len(found['light'])} rows, the same verdict in both")


RUNNERS = {"sim": part_sim, "bench": part_bench, "live": part_live, "fidelity": part_fidelity,
           "agreement": part_agreement}


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


def load_config(config: Path, parts: list[str]) -> dict:
    """The nightly config (strict YAML): a mapping with `baselines` and a section per part to run."""
    from pddbench.core.loading import read_text

    text = read_text(config, "nightly config")
    cfg = load_yaml(text, str(config))
    if not isinstance(cfg, dict):
        raise UserError(f"{config}: expected a mapping with baselines: and a section per part ({', '.join(PARTS)})")
    for key in ("baselines", *parts):
        if key not in cfg:
            raise UserError(f"{config}: no '{key}' section; add it (scenarios/gate/nightly.yaml shows each)")
    check_numbers(cfg, config, text, parts)
    return cfg


# The config's numeric fields (section, key) and their valid range (low, low included, high,
# high included, whole number): each checked before any part runs.
NUMBERS = {("bench", "max_slowdown_pct"): (0, False, 1000, True, False),
           ("fidelity", "margin_pct"): (0, True, 1000, False, False)}
MAX_NIGHTLY_REPEATS = 100  # as `run --max-repeats`


def check_numbers(cfg: dict, config: Path, text: str, parts: list[str]) -> None:
    """Every numeric field of the parts to run: a finite number within its range (repeats: a whole
    number from 1 to MAX_NIGHTLY_REPEATS), else refused naming the file, line, field and range."""
    from pddbench.schema.scenario import yaml_line

    def check(loc: tuple, value, lo, lo_in, hi, hi_in, whole) -> None:
        ok = not isinstance(value, bool) and isinstance(value, (int, float))
        if ok:
            try:
                x = float(value)
            except OverflowError:
                x = math.inf
            ok = (math.isfinite(x) and (x >= lo if lo_in else x > lo) and (x <= hi if hi_in else x < hi)
                  and (not whole or x.is_integer()))
        if not ok:
            name, line, field = loc[-1], yaml_line(text, loc)[0], ".".join(map(str, loc))
            raise UserError(f"{config}{f':{line}' if line else ''}: field '{field}': {value!r} is not "
                            f"{'a whole' if whole else 'a finite'} number in range; valid range: "
                            f"{lo:g} {'<=' if lo_in else '<'} {name} {'<=' if hi_in else '<'} {hi:g}")

    for (section, key), rng in NUMBERS.items():
        block = cfg.get(section)
        if section in parts and isinstance(block, dict) and key in block:
            check((section, key), block[key], *rng)
    for section in ("live", "fidelity"):
        block = cfg.get(section)
        if section not in parts or not isinstance(block, dict):
            continue
        if "repeats" in block:
            check((section, "repeats"), block["repeats"], 1, True, MAX_NIGHTLY_REPEATS, True, True)
        entries = block.get("scenarios")
        for name, entry in (entries.items() if isinstance(entries, dict) else []):
            if isinstance(entry, dict) and "repeats" in entry:
                check((section, "scenarios", name, "repeats"), entry["repeats"], 1, True, MAX_NIGHTLY_REPEATS, True,
                      True)
    if "fidelity" in parts and isinstance(cfg.get("fidelity"), dict):
        try:
            fidelity_rule(cfg["fidelity"])  # the gated percentiles: ones `pddbench fidelity` reports
        except UserError as exc:
            line = yaml_line(text, ("fidelity", "percentiles"))[0]
            raise UserError(f"{config}{f':{line}' if line else ''}: {exc}") from None


def nightly(config: Path, out: Path, only: list[str], update: bool, lock: str | None, history: Path | None,
            baselines: Path | None = None) -> int:
    cfg = load_config(config, list(only or PARTS))
    out.mkdir(parents=True, exist_ok=False)
    s = Suite(out, baselines or REPO / cfg["baselines"], history or out / "history", update, lock)
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
            f"{'FAILED' if failed else 'passed'}" + (" (baselines updated)" if update else "")
            + (f"; {len(s.recorded)} baseline(s) recorded, nothing compared for them" if s.recorded else ""), "",
            "| part | time | failures |", "| --- | ---: | ---: |"]
    head += [f"| {p['part']} | {p['seconds'] / 60:.1f} min | {p['failures']} |" for p in s.parts]
    if s.recorded:
        head += ["", "Baselines recorded (this host's first run of these: nothing was compared; review and "
                 "commit results/baselines):", ""] + [f"- {line}" for line in s.recorded]
    other = [f"- {c['suite']} / {c['name']}: " + ("FAIL: " + c["failure"] if c["failure"] else
                                                    "skipped: " + c["skipped"] if c["skipped"] else
                                                    "ok" + (f" ({c['output']})" if 0 < len(c["output"]) < 200 else ""))
             for c in s.cases]
    md = markdown(s.results, "pddbench nightly").replace("# pddbench nightly\n", "# pddbench nightly\n\n" +
                                                         "\n".join(head + [""] + other) + "\n", 1)
    md += "".join("\n" + sec for sec in s.sections)
    write_text(out / "nightly.md", md)
    write_text(out / "junit.xml", junit(s.results, s.cases))
    write_json(out / "nightly.json", {"parts": s.parts, "seconds": total, "results": s.results, "cases": s.cases,
                                      "recorded": s.recorded})
    print(f"nightly: {'FAILED' if failed else 'passed'} in {total / 60:.1f} min"
          + (f" ({len(s.recorded)} baseline(s) recorded, nothing compared for them)" if s.recorded else "")
          + f"; report {out / 'nightly.md'}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m pddbench.gate.nightly", description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    ap.add_argument("--out", type=Path, default=None, help="report folder (default results/nightly/<stamp>)")
    ap.add_argument("--only", action="append", choices=PARTS, default=[], help="run only these parts (repeatable)")
    ap.add_argument("--update-baselines", action="store_true",
                    help="compare, then accept every candidate as the new baseline (missing ones are recorded anyway)")
    ap.add_argument("--baselines", type=Path, default=None, help="baselines root (default: the config's baselines:)")
    ap.add_argument("--live-lock", default=None, help="flock this file around each live run and the benchmarks")
    ap.add_argument("--history", type=Path, default=REPO / "results" / "history")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # make bench, make bench-baseline
        try:
            sys.exit(bench_main(argv[1:]))
        except (UserError, KeyError) as exc:
            print(f"error: bench: {exc}", file=sys.stderr)
            sys.exit(2)
    a = ap.parse_args(argv)
    out = a.out or REPO / "results" / "nightly" / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    try:
        sys.exit(nightly(a.config, out, a.only, a.update_baselines, a.live_lock, a.history, a.baselines))
    except (UserError, FileExistsError, KeyError) as exc:
        print(f"error: nightly: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
