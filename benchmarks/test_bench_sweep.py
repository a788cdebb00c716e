"""Sweep scaling: points per second of a small capacity sweep (8 points, 1,000 requests per probe) at
-j 1 (in this process), -j 2 (process pool) and on a local Ray runtime. `make bench` runs it;
`python benchmarks/test_bench_sweep.py [ROUNDS] [REQUESTS]` prints the table the README quotes, including
start-up: efficiency = (points/s at -j 2) / (2 x points/s at -j 1); Ray per-point overhead =
(wall x workers - the points' own time) / points."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import pytest

SWEEP = """\
base: paper/pdd
measure: capacity
capacity: {iterations: 4}
set: [workload.synth.requests={requests}]
axes:
  network.wan: [cross-city-10g, cross-city-100g]
  sla.tpot_ms: [70, 80, 90, 100]
"""
BACKENDS = {"j1": (1, None), "j2": (2, None), "ray": (2, "")}


def run_once(backend: str, requests: int = 1000) -> dict:
    from pddbench.sweep.run import run_sweep

    jobs, ray = BACKENDS[backend]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(SWEEP.replace("{requests}", str(requests)))
        started = time.perf_counter()
        out = run_sweep(path, out=Path(tmp) / "out", jobs=jobs, ray=ray)
        wall = time.perf_counter() - started
        t = json.loads((out / "timings.json").read_text())
        points = len(t["points"])
        return {"backend": backend, "points": points, "wall_s": round(wall, 2),
                "points_per_s": round(points / wall, 3), "point_s_total": t["points_wall_s_total"],
                "workers": t["executor"]["workers"]}


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_sweep_scaling(benchmark, backend):
    if backend == "ray":
        pytest.importorskip("ray", reason="ray is not installed (pip install 'pddbench[cluster]')")
    res = benchmark.pedantic(run_once, args=(backend,), rounds=1, iterations=1)
    benchmark.extra_info.update(res)
    assert res["points"] == 8


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    requests = int(sys.argv[2]) if len(sys.argv) > 2 else 1000  # per probe: longer points amortise start-up
    import os

    rows = {b: [run_once(b, requests) for _ in range(rounds)] for b in BACKENDS}
    best = {b: max(r, key=lambda x: x["points_per_s"]) for b, r in rows.items()}
    for b, r in rows.items():
        print(b, "points/s per round:", [x["points_per_s"] for x in r], "best wall", best[b]["wall_s"], "s")
    eff = best["j2"]["points_per_s"] / (2 * best["j1"]["points_per_s"])
    ray = best["ray"]
    overhead = (ray["wall_s"] * ray["workers"] - ray["point_s_total"]) / ray["points"]
    print(f"-j 2 speed-up {best['j2']['points_per_s'] / best['j1']['points_per_s']:.2f}x, efficiency {eff:.0%}; "
          f"Ray local {ray['points_per_s'] / best['j1']['points_per_s']:.2f}x, per-point overhead {overhead:.2f} s; "
          f"load {os.getloadavg()}")
