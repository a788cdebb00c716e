"""Step-latency models: a roofline from chip and model specs, and a fit to measured step times.

Both answer the same two questions for an instance of `chips` chips:
- prefill_ms(tokens, attn_pairs): one chunked-prefill step computing `tokens` new tokens, where
  attn_pairs = sum over the step's requests of new_tokens * (cached context + new_tokens / 2).
- decode_ms(batch, kv_tokens, extend_tokens): one decode step of `batch` sequences reading
  `kv_tokens` of KV, plus `extend_tokens` recomputed in the same pass (Extend-Decode Handoff).

The roofline, per step of `tokens` tokens (decode: tokens = batch + extend_tokens):
- step = max(compute, memory) + communication + overhead.
- Weights read. A MoE model with experts_total E and experts_active k (top-k routing) reads its
  shared parameters S (attention, embeddings, dense layers, shared experts) plus the routed
  experts some token of the step was sent to. With routing taken as uniform and independent per
  token, a layer's expected share of experts hit is 1 - (1 - k/E)^tokens, so
      weights = S + (1 - (1 - k/E)^tokens) * (total - S)        [parameters]
  (E * (1 - (1 - k/E)^tokens) experts per layer). A lone token reads S + k/E (total - S) =
  the active parameters; coverage nears all experts only at a few hundred tokens. Real routing is
  skewed, which lowers coverage further: this is an upper bound on the bytes read. Without
  experts_total/experts_active the old bound is kept: decode reads min(total, active * tokens),
  prefill reads every weight once per step.
- Communication (tensor parallelism inside an instance of n = chips > 1 chips): two all-reduces
  per layer (after attention and after the MLP) of tokens * hidden * 2 bytes (16-bit
  activations), each a ring all-reduce moving 2 (n - 1) / n of that over each chip's
  interconnect_gbps:
      comm_ms = 2 * layers * tokens * hidden * 2 B * 2 (n - 1) / n / (interconnect_gbps / 8 GB/s)
  It is added to the step, not overlapped with it; per-message latency is not modelled (it is
  part of the fixed overhead). Expert-parallel all-to-all traffic is not modelled separately.
- Fixed per step: latency.prefill/decode_overhead_ms (scheduling), plus per layer
  latency.layer_overhead_us (the small kernels: norms, rotary, activation, residual adds, launches)
  and, on more than one chip, 2 x latency.allreduce_latency_us (each all-reduce's start-up). Both
  are 0 unless set; pddbench/measure/roofline_check.py measures them on real GPUs (H100, A100).
- A model given by its architecture (pddbench/models/architecture.py) brings its own FLOPs per
  token, attention FLOPs per pair, and, for hybrid models, a fixed state per sequence that each
  decode step reads.
"""

from __future__ import annotations

import csv
import math
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from pddbench.core.errors import InputError
from pddbench.schema.runtime_config import LatencyConfig


ACTIVATION_BYTES = 2  # 16-bit activations in the tensor-parallel all-reduces


class LatencyModel(Protocol):
    def prefill_ms(self, tokens: int, attn_pairs: float) -> float: ...
    def decode_ms(self, batch: int, kv_tokens: float, extend_tokens: int = 0) -> float: ...


@dataclass(frozen=True)
class ScaledDecode:
    """Another model's steps with decode `factor` times as long: an engine measured to decode at
    its own pace (the PDD twin's relay, twin_calibration.relay_step_factor)."""
    inner: LatencyModel
    factor: float

    def prefill_ms(self, tokens: int, attn_pairs: float) -> float:
        return self.inner.prefill_ms(tokens, attn_pairs)

    def decode_ms(self, batch: int, kv_tokens: float, extend_tokens: int = 0) -> float:
        return self.inner.decode_ms(batch, kv_tokens, extend_tokens) * self.factor


@dataclass(frozen=True)
class Roofline:
    chips: int
    peak_flops: float          # per chip, FLOP/s
    mem_bw: float              # per chip, B/s
    total_params: float
    active_params: float
    bytes_per_param: float
    kv_bytes_per_token: float
    layers: int
    hidden: int
    cfg: LatencyConfig
    experts_total: int = 0        # 0: no MoE expert model (the old weight bounds)
    experts_active: int = 0
    shared_params: float = 0.0    # parameters every token reads (MoE)
    interconnect_bw: float = 0.0  # per chip, B/s; 0: no communication term
    flops_per_token: float = 0.0      # 0: 2 x active params (a model given by its sizes)
    attn_flops_per_pair: float = 0.0  # 0: 4 x layers x hidden
    state_bytes_per_seq: float = 0.0  # hybrid models: the fixed state a decode step reads per sequence
    # Constant factors of the formulas, computed once (each step time is asked for per batch
    # change). Each is the same left-to-right product the formula would compute, so the step
    # times are bit-identical to evaluating the formulas in full.
    _flops_per_s: float = field(init=False, repr=False, compare=False)   # chips * peak * efficiency
    _bytes_per_s: float = field(init=False, repr=False, compare=False)   # chips * bw * efficiency
    _flops_per_token: float = field(init=False, repr=False, compare=False)  # 2 * active params
    _flops_per_attn_pair: float = field(init=False, repr=False, compare=False)  # 4 * layers * hidden
    _weight_bytes: float = field(init=False, repr=False, compare=False)  # total params * bytes
    _expert_miss: float = field(init=False, repr=False, compare=False)  # 1 - k/E: a token skips an expert
    _shared_bytes: float = field(init=False, repr=False, compare=False)
    _routed_bytes: float = field(init=False, repr=False, compare=False)  # all routed experts' bytes
    _comm_ms_per_token: float = field(init=False, repr=False, compare=False)
    _fixed_ms: float = field(init=False, repr=False, compare=False)  # per-layer kernels + all-reduce latency

    def __post_init__(self) -> None:
        n = self.chips
        constants = {
            "_flops_per_s": self.chips * self.peak_flops * self.cfg.compute_efficiency,
            "_bytes_per_s": self.chips * self.mem_bw * self.cfg.memory_efficiency,
            "_flops_per_token": self.flops_per_token or 2.0 * self.active_params,
            "_flops_per_attn_pair": self.attn_flops_per_pair or 4.0 * self.layers * self.hidden,
            "_weight_bytes": self.total_params * self.bytes_per_param,
            "_expert_miss": 1.0 - self.experts_active / self.experts_total if self.experts_total else 0.0,
            "_shared_bytes": self.shared_params * self.bytes_per_param,
            "_routed_bytes": (self.total_params - self.shared_params) * self.bytes_per_param,
            "_comm_ms_per_token": (2 * self.layers * self.hidden * ACTIVATION_BYTES * 2 * (n - 1) / n
                                   / self.interconnect_bw * 1e3) if n > 1 and self.interconnect_bw > 0 else 0.0,
            "_fixed_ms": self.layers * (self.cfg.layer_overhead_us
                                        + (2 * self.cfg.allreduce_latency_us if n > 1 else 0.0)) / 1e3,
        }
        for name, value in constants.items():
            object.__setattr__(self, name, value)  # frozen: set once, here

    def _compute_ms(self, tokens: float, attn_pairs: float) -> float:
        flops = self._flops_per_token * tokens + self._flops_per_attn_pair * attn_pairs
        return flops / self._flops_per_s * 1e3

    def _memory_ms(self, nbytes: float) -> float:
        return nbytes / self._bytes_per_s * 1e3

    def expert_weight_bytes(self, tokens: float) -> float:
        """MoE: the bytes of weights a step of `tokens` tokens reads (see the module docstring)."""
        return self._shared_bytes + (1.0 - self._expert_miss ** tokens) * self._routed_bytes

    def comm_ms(self, tokens: float) -> float:
        """Tensor-parallel all-reduce time of a step of `tokens` tokens (0 on one chip)."""
        return self._comm_ms_per_token * tokens

    def prefill_ms(self, tokens: int, attn_pairs: float) -> float:
        # A MoE prefill step of a few hundred tokens or more touches (nearly) every expert: all
        # weights are read once per step, which is what makes a small lone tail chunk expensive
        # per token.
        compute = self._compute_ms(tokens, attn_pairs)
        weights = self.expert_weight_bytes(tokens) if self.experts_total else self._weight_bytes
        memory = weights / self._bytes_per_s * 1e3
        return ((memory if memory > compute else compute)  # = max(compute, memory)
                + self._comm_ms_per_token * tokens + self.cfg.prefill_overhead_ms + self._fixed_ms)

    def decode_ms(self, batch: int, kv_tokens: float, extend_tokens: int = 0) -> float:
        seqs = batch + extend_tokens
        if self.experts_total:
            weights = self.expert_weight_bytes(seqs if seqs > 1 else 1)
        else:
            weights = min(self.total_params, self.active_params * (seqs if seqs > 1 else 1)) * self.bytes_per_param
        mem = (weights + kv_tokens * self.kv_bytes_per_token + seqs * self.state_bytes_per_seq) / self._bytes_per_s * 1e3
        flops = self._flops_per_token * seqs + self._flops_per_attn_pair * (
            extend_tokens * kv_tokens / (batch if batch > 1 else 1))
        compute = flops / self._flops_per_s * 1e3
        return ((compute if compute > mem else mem)  # = max(mem, compute)
                + self._comm_ms_per_token * seqs + self.cfg.decode_overhead_ms + self._fixed_ms)


def _nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """min ||a x - b|| subject to x >= 0 (Lawson and Hanson's active set; no scipy here). The
    columns are scaled to unit norm first, so coefficients of very different sizes (a fixed ms, ms
    per token, ms per attention pair) converge alike."""
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    a = a / scale
    n = a.shape[1]
    x, passive = np.zeros(n), np.zeros(n, dtype=bool)
    tol = 1e-10 * max(1.0, float(np.abs(a.T @ b).max(initial=0.0)))
    for _ in range(3 * n + 10):
        w = a.T @ (b - a @ x)
        if passive.all() or w[~passive].max() <= tol:
            break
        passive[np.flatnonzero(~passive)[np.argmax(w[~passive])]] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            gap = x[neg] - z[neg]
            alpha = float(np.min(np.where(gap > 0, x[neg] / np.where(gap > 0, gap, 1.0), 0.0)))
            x = x + alpha * (z - x)
            passive &= x > 1e-12
            x[~passive] = 0.0
    return x / scale


def fit_prefill(rows: list[tuple[float, float, float]]) -> tuple[tuple[float, ...], tuple[float, ...],
                                                                  tuple[float, ...], float]:
    """The prefill step time as f(tokens) + c * attn_pairs, f piecewise linear in the step's new
    tokens with a break at every measured size between the second smallest and the largest
    (below the second smallest size f is one line, which extends to 0 tokens and sets the fixed
    cost; past the largest the last slope continues). Fitted to the median of each measured shape
    (tokens, attn_pairs), each weighted by 1 / its median, i.e. least relative error, with every
    coefficient >= 0 (a fixed cost, slopes and c that never make a longer step cheaper).

    Why: one line over 128..4096 tokens fitted by absolute error let the long prompts set the
    intercept (204 ms on the AVX2 host) while the live traces' typical prefill computes ~22 new
    tokens in 10-50 ms. Returns (breaks, f at each break, slope from each break, c); breaks[0] is 0."""
    shapes: dict[tuple[float, float], list[float]] = {}
    for t, pairs, ms in rows:
        shapes.setdefault((t, pairs), []).append(ms)
    pts = np.array([(t, pairs, float(np.median(v))) for (t, pairs), v in shapes.items()])
    sizes = np.unique(pts[:, 0])
    inner = [float(k) for k in sizes[1:-1]]   # breaks between segments
    edges = [0.0] + inner
    tok = pts[:, 0]
    cols = [np.ones(len(pts))]
    for i, lo in enumerate(edges):  # segment i's tokens: the part of `tokens` inside [edges[i], edges[i+1])
        hi = edges[i + 1] if i + 1 < len(edges) else np.inf
        cols.append(np.clip(tok - lo, 0.0, hi - lo))
    cols.append(pts[:, 1])
    design = np.column_stack(cols)
    weight = 1.0 / np.maximum(pts[:, 2], 1e-3)
    coef = _nnls(design * weight[:, None], pts[:, 2] * weight)
    fixed, slopes, c = float(coef[0]), [float(v) for v in coef[1:-1]], float(coef[-1])
    values = [fixed]
    for i in range(1, len(edges)):
        values.append(values[-1] + slopes[i - 1] * (edges[i] - edges[i - 1]))
    return tuple(edges), tuple(values), tuple(slopes), c


@dataclass(frozen=True)
class Calibrated:
    """Fits to measured steps. Prefill: f(tokens) + c * attn_pairs with f piecewise linear in the
    step's new tokens (`fit_prefill`: breaks at the measured sizes, least relative error, every
    coefficient >= 0); decode = a + b*(batch + extend) + c*kv_tokens (least squares).
    `Calibrated.linear((a, b, c), decode_coef)`: prefill = a + b*tokens + c*attn_pairs."""
    prefill_breaks: tuple[float, ...]      # token counts where f's slope changes; the first is 0
    prefill_at_breaks: tuple[float, ...]   # f at each break (ms)
    prefill_slopes: tuple[float, ...]      # ms per token from each break on
    prefill_attn_ms: float                 # ms per attention pair
    decode_coef: tuple[float, float, float]

    @classmethod
    def linear(cls, prefill_coef: tuple[float, float, float], decode_coef: tuple[float, float, float]) -> "Calibrated":
        a, b, c = prefill_coef
        return cls((0.0,), (a,), (b,), c, decode_coef)

    def prefill_ms(self, tokens: int, attn_pairs: float) -> float:
        i = bisect_right(self.prefill_breaks, tokens) - 1
        if i < 0:
            i = 0
        ms = (self.prefill_at_breaks[i] + self.prefill_slopes[i] * (tokens - self.prefill_breaks[i])
              + self.prefill_attn_ms * attn_pairs)
        return ms if ms > 0.01 else 0.01

    def decode_ms(self, batch: int, kv_tokens: float, extend_tokens: int = 0) -> float:
        a, b, c = self.decode_coef
        return max(0.01, a + b * (batch + extend_tokens) + c * kv_tokens)

    def describe(self) -> dict:
        """The fitted prefill curve and decode line, for a report."""
        return {"prefill": {"breaks_tokens": list(self.prefill_breaks), "ms_at_breaks": list(self.prefill_at_breaks),
                            "ms_per_token": list(self.prefill_slopes), "ms_per_attn_pair": self.prefill_attn_ms},
                "decode": dict(zip(("ms", "ms_per_seq", "ms_per_kv_token"), self.decode_coef))}

    @classmethod
    def fit_csv(cls, path: str | Path) -> "Calibrated":
        path = Path(path)
        if not path.is_file():
            raise InputError(str(path), "no such calibration CSV")
        rows: dict[str, list[tuple[float, float, float]]] = {"prefill": [], "decode": []}
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            for line, rec in enumerate(reader, start=2):
                phase = (rec.get("phase") or "").strip()
                if phase not in rows:
                    raise InputError(str(path), f"must be 'prefill' or 'decode', got {phase!r}", line, "phase")
                try:
                    step = float(rec["step_ms"])
                    if phase == "prefill":
                        x1, x2 = float(rec["tokens"]), float(rec.get("attn_pairs") or 0)
                    else:
                        x1, x2 = float(rec["batch"]), float(rec["kv_tokens"])
                except (KeyError, TypeError, ValueError) as exc:
                    raise InputError(str(path), f"bad or missing number ({exc})", line) from None
                if not all(math.isfinite(v) for v in (x1, x2, step)):
                    raise InputError(str(path), "holds a NaN or infinite number", line)
                rows[phase].append((x1, x2, step))
        for phase in ("prefill", "decode"):
            if len(rows[phase]) < 3:
                raise InputError(str(path), f"needs at least 3 '{phase}' rows to fit, has {len(rows[phase])}")
        arr = np.array(rows["decode"])
        design = np.column_stack([np.ones(len(arr)), arr[:, 0], arr[:, 1]])
        coef, *_ = np.linalg.lstsq(design, arr[:, 2], rcond=None)
        return cls(*fit_prefill(rows["prefill"]), tuple(float(c) for c in coef))
