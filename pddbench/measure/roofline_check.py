"""The simulator's roofline against step times measured on real GPUs, and the fit of a chip's
latency terms to measured steps (used here on public profiles and by benchmarks/gpu/calibrate.sh
on a lent GPU).

The measurements (pddbench/data/gpu_profiles/, PROVENANCE.md there) are Vidur's per-layer operator
medians on H100 and A100 for dense Llama-family models at tensor-parallel sizes 1-8 and 1-4096
tokens: every linear layer, norm, rotary, activation and residual add, plus two all-reduces per
layer when TP > 1. A measured step is layers x the sum of one layer's operators. The attention
kernel (softmax(QK^T)V) is not in those profiles, so this check validates the weights, FLOPs and
communication part of the roofline, not its attention term (attn_pairs = 0, no KV read).

The prediction is pddbench.sim.latency.Roofline itself, on the layers' parameters (the embedding
and LM head are outside Vidur's sums), with the scheduling overheads (prefill/decode_overhead_ms,
which are CPU time around the GPU's work) set to 0.

Fit: compute and memory efficiency on a grid (step 0.01), and for each pair the two fixed terms
(layer_overhead_us, allreduce_latency_us, each >= 0) by least relative squares; the pair with the
least median + mean relative error wins. Fitted on the training models, judged on the others.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from pddbench.models.architecture import Architecture, derive
from pddbench.schema.runtime_config import LatencyConfig
from pddbench.sim.latency import Roofline

PROFILES = Path(__file__).resolve().parents[1] / "data" / "gpu_profiles"
OPS = ("input_layernorm_ms", "attn_pre_proj_ms", "attn_rope_ms", "attn_post_proj_ms", "post_attention_layernorm_ms",
       "mlp_up_proj_ms", "mlp_act_ms", "mlp_down_proj_ms", "add_ms")


@dataclass(frozen=True)
class MeasuredChip:
    """A real chip's datasheet figures: dense 16-bit peak, HBM bandwidth, and NVLink per GPU in one
    direction (a ring all-reduce sends and receives at once; the datasheet's figure counts both)."""
    peak_tflops: float
    memory_bw_tbps: float
    interconnect_gbps: float
    source: str


# Vidur does not record the variant; its DGX network profiles say SXM boards (80 GB assumed for A100).
MEASURED_CHIPS = {
    "h100": MeasuredChip(989.4, 3.35, 3600, "NVIDIA H100 SXM5 datasheet: 989 TFLOPS dense BF16, 3.35 TB/s HBM3, "
                                            "NVLink 900 GB/s both directions = 450 GB/s each way"),
    "a100": MeasuredChip(312.0, 2.039, 2400, "NVIDIA A100 SXM4 80GB datasheet: 312 TFLOPS dense BF16, 2.039 TB/s "
                                             "HBM2e, NVLink 600 GB/s both directions = 300 GB/s each way"),
}

# The profiled models (Hugging Face config.json facts; PROVENANCE.md's table). Vidur profiled the
# Llama-2 family with a 32768 vocabulary: only the embedding, outside the sums, sees it.
PROFILED_MODELS = {
    "meta-llama/Llama-2-7b-hf": dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32,
                                     num_key_value_heads=32, intermediate_size=11008, vocab_size=32000),
    "meta-llama/Meta-Llama-3-8B": dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32,
                                       num_key_value_heads=8, intermediate_size=14336, vocab_size=128256),
    "codellama/CodeLlama-34b-Instruct-hf": dict(num_hidden_layers=48, hidden_size=8192, num_attention_heads=64,
                                                num_key_value_heads=8, intermediate_size=22016, vocab_size=32000),
    "meta-llama/Llama-2-70b-hf": dict(num_hidden_layers=80, hidden_size=8192, num_attention_heads=64,
                                      num_key_value_heads=8, intermediate_size=28672, vocab_size=32000),
    "meta-llama/Meta-Llama-3-70B": dict(num_hidden_layers=80, hidden_size=8192, num_attention_heads=64,
                                        num_key_value_heads=8, intermediate_size=28672, vocab_size=128256),
    "Qwen/Qwen-72B": dict(num_hidden_layers=80, hidden_size=8192, num_attention_heads=64, num_key_value_heads=64,
                          intermediate_size=24576, vocab_size=152064),
}
TRAINING_MODELS = ("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-70b-hf")  # the fit's; the rest are held out


@dataclass(frozen=True)
class Step:
    chip: str
    model: str
    tp: int
    tokens: int
    measured_ms: float


@dataclass(frozen=True)
class ChipFit:
    compute_efficiency: float
    memory_efficiency: float
    layer_overhead_us: float
    allreduce_latency_us: float

    def latency(self) -> LatencyConfig:
        """The fitted terms as the scenario's latency section (scheduling overheads left at 0)."""
        return LatencyConfig(compute_efficiency=self.compute_efficiency, memory_efficiency=self.memory_efficiency,
                             prefill_overhead_ms=0.0, decode_overhead_ms=0.0,
                             layer_overhead_us=self.layer_overhead_us, allreduce_latency_us=self.allreduce_latency_us)


def layer_params(model: str) -> tuple[float, int, int]:
    """(parameters of the transformer layers, layers, hidden) of a profiled model."""
    arch = Architecture(**PROFILED_MODELS[model])
    d = derive(arch)
    embeddings = arch.vocab_size * arch.hidden_size * (1 if arch.tie_word_embeddings else 2)
    return d.params_total_b * 1e9 - embeddings, arch.num_hidden_layers, arch.hidden_size


@lru_cache(maxsize=1)
def measured_steps() -> tuple[Step, ...]:
    """Every profiled (chip, model, tp, tokens) as one forward step of the layers, in ms."""
    import pandas as pd

    mlp = pd.read_csv(PROFILES / "vidur_mlp.csv")
    reduce = pd.read_csv(PROFILES / "vidur_all_reduce.csv")
    steps = []
    for r in mlp.itertuples(index=False):
        _, layers, hidden = layer_params(r.model)
        ms = layers * sum(getattr(r, op) for op in OPS)
        if r.tp > 1:
            line = reduce[(reduce.network == f"{r.chip}_dgx") & (reduce.tp == r.tp)].sort_values("size_bytes")
            ms += 2 * layers * float(np.interp(r.num_tokens * hidden * 2, line.size_bytes, line.all_reduce_ms))
        steps.append(Step(r.chip, r.model, int(r.tp), int(r.num_tokens), float(ms)))
    return tuple(steps)


def roofline_for(step: Step, latency: LatencyConfig, chip: MeasuredChip | None = None) -> Roofline:
    params, layers, hidden = layer_params(step.model)
    chip = chip or MEASURED_CHIPS[step.chip]
    return Roofline(chips=step.tp, peak_flops=chip.peak_tflops * 1e12, mem_bw=chip.memory_bw_tbps * 1e12,
                    total_params=params, active_params=params, bytes_per_param=2, kv_bytes_per_token=0,
                    layers=layers, hidden=hidden, cfg=latency, interconnect_bw=chip.interconnect_gbps * 1e9 / 8)


def predicted_ms(step: Step, latency: LatencyConfig) -> tuple[float, float]:
    """The simulator's prefill and decode step for the step's tokens (no attention, no KV)."""
    rf = roofline_for(step, latency)
    return rf.prefill_ms(step.tokens, 0.0), rf.decode_ms(step.tokens, 0.0)


def error_stats(errors: list[float]) -> dict:
    """Relative errors (predicted / measured - 1) as median, p90 and worst of their sizes, and the bias."""
    a = np.abs(np.asarray(errors, dtype=float))
    return {"steps": int(a.size), "median_abs_error": round(float(np.median(a)), 4),
            "p90_abs_error": round(float(np.quantile(a, 0.9)), 4), "worst_abs_error": round(float(a.max()), 4),
            "median_signed_error": round(float(np.median(errors)), 4)}


def errors_of(steps, latency: LatencyConfig) -> list[float]:
    """Relative errors of the roofline's step for each measured step. (Its decode step of the same
    tokens with no KV is the same computation: these profiles cannot check decode's KV read.)"""
    return [predicted_ms(s, latency)[0] / s.measured_ms - 1 for s in steps]


def phase_stats(steps, latency: LatencyConfig) -> dict:
    """Error statistics over `steps`, and the median signed error per tensor-parallel size (a
    bias the overall median can hide: the all-reduces grow with TP)."""
    by_tp = {}
    for tp in sorted({s.tp for s in steps}):
        errs = errors_of([s for s in steps if s.tp == tp], latency)
        by_tp[str(tp)] = round(float(np.median(errs)), 4)
    return {**error_stats(errors_of(steps, latency)), "median_signed_error_by_tp": by_tp}


def fit_terms(compute: np.ndarray, memory: np.ndarray, comm: np.ndarray, fixed: np.ndarray,
              measured: np.ndarray) -> tuple[float, float, np.ndarray]:
    """The roofline's terms fitted to measured steps: step = max(compute / ce, memory / me) + comm
    + fixed @ coef, with compute and memory the roofline's times at 100 % of peak and bandwidth,
    `fixed` one column per fixed term (ms per unit of its coefficient). Deterministic: ce and me
    on a grid of 0.01, and for each pair the coefficients (>= 0) by least squares of the relative
    error; the pair with the least median + mean relative error wins. Returns (ce, me, coef)."""
    design = fixed / measured[:, None]
    best: tuple[float, float, float, np.ndarray] | None = None
    for ce in np.round(np.arange(0.10, 1.0001, 0.01), 2):
        base_c = compute / ce
        for me in np.round(np.arange(0.10, 1.0001, 0.01), 2):
            target = (measured - (np.maximum(base_c, memory / me) + comm)) / measured
            coef = _nonnegative_lstsq(design, target)
            resid = np.abs(design @ coef - target)
            score = float(np.median(resid) + resid.mean())
            if best is None or score < best[0] - 1e-12:
                best = (score, float(ce), float(me), coef)
    assert best is not None
    return best[1], best[2], best[3]


def fit_chip(rows: list[tuple[float, float, float, float, float, float]]) -> ChipFit:
    """Fit the latency terms to measured layer steps. Each row: (compute ms at 100 % of peak,
    memory ms at 100 % of bandwidth, bandwidth part of the all-reduces in ms, layers, all-reduces
    per step, measured ms)."""
    x = np.asarray(rows, dtype=float)
    ce, me, coef = fit_terms(x[:, 0], x[:, 1], x[:, 2], x[:, 3:5] / 1e3, x[:, 5])  # us -> ms
    return ChipFit(ce, me, round(float(coef[0]), 3), round(float(coef[1]), 3))


def _nonnegative_lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0, exactly: each subset of the (few) columns."""
    from itertools import combinations

    k = a.shape[1]
    best, best_cost = np.zeros(k), float(b @ b)
    for n in range(1, k + 1):
        for cols in combinations(range(k), n):
            coef = np.zeros(k)
            coef[list(cols)] = np.linalg.lstsq(a[:, list(cols)], b, rcond=None)[0]
            if (coef >= 0).all():
                cost = float(np.sum((a @ coef - b) ** 2))
                if cost < best_cost:
                    best, best_cost = coef, cost
    return best


def fit_rows(steps, chip: MeasuredChip | None = None) -> list[tuple[float, float, float, float, float, float]]:
    """The fit's rows for measured steps: the roofline's own terms at 100 % efficiency."""
    rows = []
    unit = LatencyConfig(compute_efficiency=1.0, memory_efficiency=1.0, prefill_overhead_ms=0.0,
                         decode_overhead_ms=0.0)
    for s in steps:
        rf = roofline_for(s, unit, chip)
        rows.append((rf._compute_ms(s.tokens, 0.0), rf._memory_ms(rf._weight_bytes), rf.comm_ms(s.tokens),
                     rf.layers, 2 * rf.layers if s.tp > 1 else 0, s.measured_ms))
    return rows


def check(shipped: LatencyConfig | None = None, chips: tuple[str, ...] = tuple(MEASURED_CHIPS)) -> dict:
    """Per measured chip: the roofline's error at the shipped latency settings (the paper
    scenarios', scheduling overheads aside), the fit on the training models, and the fitted
    roofline's error on the held-out models and on all."""
    shipped = shipped or LatencyConfig()
    as_shipped = shipped.model_copy(update={"prefill_overhead_ms": 0.0, "decode_overhead_ms": 0.0})
    out = {}
    for chip in chips:
        steps = [s for s in measured_steps() if s.chip == chip]
        train = [s for s in steps if s.model in TRAINING_MODELS]
        held = [s for s in steps if s.model not in TRAINING_MODELS]
        fit = fit_chip(fit_rows(train))
        out[chip] = {"source": MEASURED_CHIPS[chip].source,
                     "models": sorted({s.model for s in steps}), "held_out_models": sorted({s.model for s in held}),
                     "shipped_settings": {"compute_efficiency": shipped.compute_efficiency,
                                          "memory_efficiency": shipped.memory_efficiency,
                                          **phase_stats(steps, as_shipped)},
                     "fit": asdict(fit),
                     "fitted_held_out": phase_stats(held, fit.latency()),
                     "fitted_all": phase_stats(steps, fit.latency())}
    return out
