"""The benchmark yardstick: a fixed pure-Python loop timed right before and after each benchmark,
so a benchmark is gated on its time relative to the yardstick's, not on absolute time.

Why: hosts that share one host key (same CPU model, ISA level, cores) differ by up to ~2x in
absolute speed between VM boots and hours of load (measured: the same code 48-141 % slower than a
baseline recorded three days earlier on the "same" host), while a benchmark's ratio to a loop timed
beside it moves far less. Each side keeps the fastest of its repetitions (the least disturbed).
"""

from __future__ import annotations

import heapq
import math
import time

EXTRA_KEY = "yardstick_min_s"  # where a benchmark keeps its yardstick (pytest-benchmark's extra_info)


def reference_loop() -> float:
    """Fixed work of the kinds the benchmarks do (heap, dict and list traffic, float arithmetic,
    string parsing), a few milliseconds on this machine kind. Never change it without recording
    every host's baseline anew: the baselines' ratios are relative to this exact loop."""
    heap: list[tuple[float, int]] = []
    seen: dict[int, float] = {}
    acc = 0.0
    for i in range(4000):
        t = (i * 7919) % 1009 / 7.0
        heapq.heappush(heap, (t, i))
        seen[i % 257] = seen.get(i % 257, 0.0) + math.sqrt(t + 1.0)
        if len(heap) > 64:
            acc += heapq.heappop(heap)[0]
        if i % 8 == 0:
            acc += float(f"{i}.5 tokens".split()[0])
    return acc + sum(seen.values())


def yardstick_min_s(repeats: int = 15) -> float:
    """The fastest of `repeats` timings of the reference loop, in seconds of this process's CPU
    time (the benchmarks' timer in the nightly: time slices lost to other jobs do not count)."""
    best = math.inf
    for _ in range(repeats):
        t0 = time.process_time()
        reference_loop()
        best = min(best, time.process_time() - t0)
    return best


def _timings(doc: dict) -> dict[str, tuple[float, float | None]]:
    """fullname -> (min_s, yardstick_min_s or None) of a saved pytest-benchmark run."""
    out = {}
    for b in doc.get("benchmarks", []):
        stick = (b.get("extra_info") or {}).get(EXTRA_KEY)
        ok = isinstance(stick, (int, float)) and not isinstance(stick, bool) and math.isfinite(stick) and stick > 0
        out[b["fullname"]] = (float(b["stats"]["min"]), float(stick) if ok else None)
    return out


def normalised_changes(base_doc: dict, run_doc: dict, names: set[str]) -> list[dict]:
    """For each benchmark in `names` that both runs hold: its min and yardstick on both sides and
    change_pct, the change of min/yardstick (positive: slower relative to the yardstick);
    change_pct is None where either side has no yardstick (a baseline from before it existed)."""
    base, run = _timings(base_doc), _timings(run_doc)
    rows = []
    for name in sorted(names & base.keys() & run.keys()):
        (bmin, bstick), (rmin, rstick) = base[name], run[name]
        change = None
        if bstick and rstick and bmin > 0:
            change = round(((rmin / rstick) / (bmin / bstick) - 1.0) * 100.0, 1)
        rows.append({"benchmark": name, "base_min_s": bmin, "run_min_s": rmin, "base_yardstick_s": bstick,
                     "run_yardstick_s": rstick, "change_pct": change})
    return rows


def changes_table(rows: list[dict], max_slowdown_pct: float) -> str:
    """The comparison as text: one line a benchmark, the absolute mins, the host's speed now relative
    to the baseline's (yardstick base / now: below 1, slower now) and the normalised change."""
    lines = [f"relative to the yardstick (fails above +{max_slowdown_pct:g} %):",
             f"  {'benchmark':<40} {'base min ms':>11} {'now min ms':>10} {'host speed':>14} {'change':>8}"]
    for r in rows:
        stick = (f"{r['base_yardstick_s'] / r['run_yardstick_s']:.2f}"
                 if r["base_yardstick_s"] and r["run_yardstick_s"] else "none")
        change = "n/a" if r["change_pct"] is None else f"{r['change_pct']:+.1f}%"
        lines.append(f"  {r['benchmark'].split('::')[-1]:<40} {r['base_min_s'] * 1e3:>11.3f} {r['run_min_s'] * 1e3:>10.3f} "
                     f"{stick:>14} {change:>8}")
    return "\n".join(lines)
