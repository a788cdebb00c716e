"""A chip's latency model from step times measured on it (benchmarks/gpu/calibrate.sh, part 1).

vLLM serves a real architecture with dummy weights (`load_format="dummy"`: no download; the
config.json is shipped, benchmarks/gpu/llama-3-8b/), prefix caching off. Measured:
- prefill: one prompt of n tokens, one output token, for n on a grid (one step: the batch budget
  holds the prompt); attn_pairs = n^2 / 2;
- decode: b prompts of c tokens, 1 then 1 + K output tokens; a decode step is the difference / K,
  at kv_tokens = b x (c + K / 2).
Each shape is timed `repeats` times after a warm-up, the median kept. The rows are written as a
calibration CSV (phase, tokens, attn_pairs, batch, kv_tokens, step_ms: `latency.kind: calibrated`
reads it as it is), then the roofline's terms are fitted to them (pddbench/measure/roofline_check.
fit_terms: compute and memory efficiency and a fixed cost of a prefill and of a decode step) on the chip's
datasheet figures, and the simulator-vs-measured error is printed before the fit (the shipped
H100 terms) and after it. Prints and writes calibration.json under --out.

Not a test: it needs vLLM; on a CPU host `--smoke` runs a tiny grid on a one-layer copy of the
architecture (hf_overrides) to show the pipeline works (tests/test_gpu_calibration.py)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from pddbench.measure.roofline_check import MEASURED_CHIPS, fit_terms

PREFILL_TOKENS = (128, 256, 512, 1024, 2048, 4096, 8192)
DECODE_BATCHES = (1, 8, 32, 64, 128, 256)
DECODE_CONTEXTS = (512, 2048)
DECODE_STEPS = 32
SMOKE = {"prefill": (16, 32, 64), "batches": (1, 2, 4), "contexts": (32,), "steps": 4, "repeats": 1}  # 3 each: fit_csv's minimum


def _timed(llm, prompts: list[list[int]], max_tokens: int) -> float:
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, detokenize=False)  # always max_tokens
    t0 = time.perf_counter()
    llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return (time.perf_counter() - t0) * 1e3


def kv_capacity_tokens(llm) -> int | None:
    """Tokens the engine's KV cache holds (None where this vLLM does not say)."""
    try:
        cache = llm.llm_engine.vllm_config.cache_config
        return int(cache.num_gpu_blocks) * int(cache.block_size)
    except (AttributeError, TypeError, ValueError):
        return None


def measure(llm, prefill: tuple[int, ...], batches: tuple[int, ...], contexts: tuple[int, ...], steps: int,
            repeats: int, vocab: int, kv_tokens: int | None = None, seed: int = 0) -> list[dict]:
    """The calibration rows (module docstring). Prompts are random token ids from `seed`. A decode
    shape whose KV does not fit `kv_tokens` is skipped (vLLM would queue or preempt, and the
    difference would not be a step of that batch), and said so."""
    rng = np.random.default_rng(seed)
    prompt = lambda n: rng.integers(10, vocab - 10, n).tolist()  # fresh ids: nothing cached
    _timed(llm, [prompt(max(prefill))], 1)  # warm-up: compile, graphs, allocator
    rows = []
    for n in prefill:
        ms = statistics.median(_timed(llm, [prompt(n)], 1) for _ in range(repeats))
        rows.append({"phase": "prefill", "tokens": n, "attn_pairs": n * n / 2, "batch": "", "kv_tokens": "",
                     "step_ms": round(ms, 4)})
        print(f"  prefill {n:>6} tokens: {ms:8.2f} ms", flush=True)
    for c in contexts:
        for b in batches:
            if kv_tokens is not None and b * (c + steps + 1) > kv_tokens:
                print(f"  decode batch {b:>4} x {c:>5} tokens: skipped, needs {b * (c + steps + 1):,} KV tokens, "
                      f"the engine holds {kv_tokens:,}", flush=True)
                continue
            one = statistics.median(_timed(llm, [prompt(c) for _ in range(b)], 1) for _ in range(repeats))
            more = statistics.median(_timed(llm, [prompt(c) for _ in range(b)], 1 + steps) for _ in range(repeats))
            ms = max(more - one, 0.0) / steps
            rows.append({"phase": "decode", "tokens": "", "attn_pairs": "", "batch": b,
                         "kv_tokens": b * (c + steps / 2), "step_ms": round(ms, 4)})
            print(f"  decode batch {b:>4} x {c:>5} tokens: {ms:8.3f} ms a step", flush=True)
    return rows


def fit_rows(rows: list[dict], model, chip) -> tuple[np.ndarray, ...]:
    """The fit's inputs for measured engine steps: the roofline's compute and memory times at 100 %
    (prefill: the step's FLOPs incl. attention and its weights; decode: batch tokens' FLOPs and the
    weights plus KV read), and two fixed columns: a prefill step's and a decode step's fixed cost
    in ms (one model cannot tell a per-layer cost from a per-step one: they are one term here)."""
    from pddbench.schema.runtime_config import LatencyConfig
    from pddbench.sim.latency import Roofline

    unit = LatencyConfig(compute_efficiency=1.0, memory_efficiency=1.0, prefill_overhead_ms=0.0,
                         decode_overhead_ms=0.0)
    rf = Roofline(chips=1, peak_flops=chip.peak_tflops * 1e12, mem_bw=chip.memory_bw_tbps * 1e12,
                  total_params=model.params_total_b * 1e9, active_params=model.params_active_b * 1e9,
                  bytes_per_param=model.weight_bytes_per_param, kv_bytes_per_token=model.kv_bytes_per_token,
                  layers=model.layers, hidden=model.hidden_size, cfg=unit, flops_per_token=model.flops_per_token or 0.0,
                  attn_flops_per_pair=model.attn_flops_per_pair or 0.0)
    compute, memory, measured = [], [], []
    for r in rows:
        if r["phase"] == "prefill":
            compute.append(rf._compute_ms(float(r["tokens"]), float(r["attn_pairs"])))
            memory.append(rf._memory_ms(rf._weight_bytes))
        else:
            b, kv = float(r["batch"]), float(r["kv_tokens"])
            compute.append(rf._compute_ms(b, 0.0))
            memory.append(rf._memory_ms(rf._weight_bytes + kv * rf.kv_bytes_per_token))
        measured.append(float(r["step_ms"]))
    prefill = np.array([r["phase"] == "prefill" for r in rows], dtype=float)
    fixed = np.column_stack([prefill, 1.0 - prefill])
    return np.array(compute), np.array(memory), np.zeros(len(rows)), fixed, np.array(measured)


def predicted(compute, memory, comm, fixed, ce: float, me: float, coef) -> np.ndarray:
    return np.maximum(compute / ce, memory / me) + comm + fixed @ np.asarray(coef)


def error_summary(pred: np.ndarray, measured: np.ndarray) -> dict:
    e = np.abs(pred / measured - 1)
    return {"steps": int(e.size), "median_abs_error": round(float(np.median(e)), 4),
            "p90_abs_error": round(float(np.quantile(e, 0.9)), 4), "worst_abs_error": round(float(e.max()), 4)}


def calibrate(rows: list[dict], model, chip, before) -> dict:
    """Errors of the roofline at the `before` latency settings, the fit, and its errors."""
    compute, memory, comm, fixed, measured = fit_rows(rows, model, chip)
    usable = measured > 0
    compute, memory, comm, fixed, measured = (a[usable] for a in (compute, memory, comm, fixed, measured))
    per_layer_ms = model.layers * before.layer_overhead_us / 1e3  # one chip: no all-reduce
    old = predicted(compute, memory, comm, fixed, before.compute_efficiency, before.memory_efficiency,
                    [before.prefill_overhead_ms + per_layer_ms, before.decode_overhead_ms + per_layer_ms])
    ce, me, coef = fit_terms(compute, memory, comm, fixed, measured)
    return {"before": {"compute_efficiency": before.compute_efficiency, "memory_efficiency": before.memory_efficiency,
                       "layer_overhead_us": before.layer_overhead_us,
                       "prefill_overhead_ms": before.prefill_overhead_ms,
                       "decode_overhead_ms": before.decode_overhead_ms, **error_summary(old, measured)},
            "fit": {"compute_efficiency": ce, "memory_efficiency": me,
                    "prefill_overhead_ms": round(float(coef[0]), 4), "decode_overhead_ms": round(float(coef[1]), 4),
                    "note": "the fixed costs include the per-layer kernels (one model cannot separate them)"},
            "after": error_summary(predicted(compute, memory, comm, fixed, ce, me, coef), measured)}


def _cpu_env() -> dict[str, str] | None:
    """What a CPU vLLM engine needs in its environment (as pddbench's engines get it), or None
    when this process already has it."""
    from pddbench.live.engines import ENGINE_SITE, preload_libraries

    if os.environ.get("PDDBENCH_CALIBRATION_CHILD"):
        return None
    env = dict(os.environ, PDDBENCH_CALIBRATION_CHILD="1", VLLM_CPU_KVCACHE_SPACE="2", HF_HUB_OFFLINE="1",
               VLLM_LOGGING_LEVEL="WARNING", TOKENIZERS_PARALLELISM="false")
    libs = preload_libraries()
    if libs:
        env["LD_PRELOAD"] = ":".join(libs + [p for p in env.get("LD_PRELOAD", "").split(":") if p])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ENGINE_SITE), env.get("PYTHONPATH", "")) if p)
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pddbench.measure.gpu_calibration", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="folder with the architecture's config.json (dummy weights)")
    ap.add_argument("--model", default="llama-3-8b", help="the shipped model of that architecture (pddbench model list)")
    ap.add_argument("--chip", default="h100", help="datasheet figures of the chip: h100 or a100 (roofline_check)")
    ap.add_argument("--out", required=True, help="folder for calibration.csv and calibration.json")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="CPU: a tiny grid on a one-layer copy (pipeline check)")
    args = ap.parse_args(argv)
    cfg_dir, out = Path(args.config), Path(args.out)
    if not (cfg_dir / "config.json").is_file():
        print(f"error: --config {cfg_dir}: no config.json there", file=sys.stderr)
        return 2
    if args.chip not in MEASURED_CHIPS:
        print(f"error: --chip {args.chip!r}: one of {', '.join(MEASURED_CHIPS)}", file=sys.stderr)
        return 2
    if args.smoke and (env := _cpu_env()) is not None:  # re-run with a CPU engine's environment
        import subprocess

        return subprocess.call([sys.executable, "-m", "pddbench.measure.gpu_calibration", *(argv or sys.argv[1:])],
                               env=env)
    out.mkdir(parents=True, exist_ok=True)
    from vllm import LLM

    from pddbench.core.io import write_json, write_text
    from pddbench.report.model_card import load_model
    from pddbench.core.shipped import SCENARIOS
    from pddbench.schema.scenario import Model, load_scenario

    config = json.loads((cfg_dir / "config.json").read_text())
    grid = SMOKE if args.smoke else {"prefill": PREFILL_TOKENS, "batches": DECODE_BATCHES,
                                     "contexts": DECODE_CONTEXTS, "steps": DECODE_STEPS, "repeats": args.repeats}
    overrides = {"num_hidden_layers": 1, "vocab_size": 4096} if args.smoke else {}
    engine_overrides = {**overrides, "bos_token_id": 1, "eos_token_id": 2} if overrides else {}  # ids in the small vocab
    top = max(grid["prefill"]) + 2 * max(grid["contexts"]) + grid["steps"] + 64
    # the step budget holds the longest prompt in one step; wider would only grow vLLM's start-up
    # profiling run (a 256 x 2,048-token budget needs tens of GB of activations on an 8B model; on
    # the CPU smoke, vLLM's start-up warm-up (its profile run at the step budget) took 12 of its 15
    # minutes at 16,384 tokens on an AVX2 host)
    budget = top if args.smoke else max(top, 16384)
    llm = LLM(model=str(cfg_dir), load_format="dummy", skip_tokenizer_init=True, enable_prefix_caching=False,
              max_model_len=top, max_num_batched_tokens=budget,
              max_num_seqs=max(grid["batches"]), hf_overrides=engine_overrides or None, seed=0,
              **({} if args.smoke else {"gpu_memory_utilization": 0.85}))
    print(f"measuring {args.model} ({'one-layer smoke copy' if args.smoke else 'dummy weights'}) ...", flush=True)
    rows = measure(llm, grid["prefill"], grid["batches"], grid["contexts"], grid["steps"], grid["repeats"],
                   overrides.get("vocab_size", config.get("vocab_size", 32000)), kv_capacity_tokens(llm))
    header = "phase,tokens,attn_pairs,batch,kv_tokens,step_ms\n"
    write_text(out / "calibration.csv", header + "".join(
        f"{r['phase']},{r['tokens']},{r['attn_pairs']},{r['batch']},{r['kv_tokens']},{r['step_ms']}\n" for r in rows))
    model, _ = load_model(args.model)
    if overrides and model.arch is not None:  # the smoke copy's own sizes
        model = Model(name=model.name, arch=model.arch.model_copy(update=overrides),
                      weight_bytes_per_param=model.weight_bytes_per_param)
    before = load_scenario(SCENARIOS / "paper" / "pdd.yaml").latency
    result = calibrate(rows, model, MEASURED_CHIPS[args.chip], before)
    result.update(chip=args.chip, model=args.model, smoke=args.smoke, rows=len(rows))
    write_json(out / "calibration.json", result)
    b, a, f = result["before"], result["after"], result["fit"]
    print(f"sim vs measured, before the fit (paper terms): median {100 * b['median_abs_error']:.1f} %, "
          f"p90 {100 * b['p90_abs_error']:.1f} %, worst {100 * b['worst_abs_error']:.1f} %")
    print(f"fit: compute efficiency {f['compute_efficiency']:g}, memory {f['memory_efficiency']:g}, fixed "
          f"{f['prefill_overhead_ms']:g} ms a prefill step, {f['decode_overhead_ms']:g} ms a decode step")
    print(f"sim vs measured, after the fit: median {100 * a['median_abs_error']:.1f} %, "
          f"p90 {100 * a['p90_abs_error']:.1f} %, worst {100 * a['worst_abs_error']:.1f} %")
    print(f"wrote {out / 'calibration.csv'} and {out / 'calibration.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
