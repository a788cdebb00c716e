"""Analytic upper bounds on a split's throughput within SLA, from the roofline latency model and
the trace, so that `optimize --prune` simulates only the splits that could win (issue 27.3).

A split's request rate is at most the smaller of its pools' rates, each computed as if the pool
were perfectly batched and never queued:
- prefill: every request's uncached tokens under an ideal prefix cache (every block seen earlier
  is a hit: the least work any cache can leave), each costing at least its compute
  (2 x active params per token + 4 x layers x hidden per attention pair) and its tensor-parallel
  communication; the weights' memory time, the fixed step overhead and the queue are left out, so
  real prefill is slower. Rate = instances x 1000 / mean per-request milliseconds.
- decode (D, or RLD + MD for PDD): per instance the largest batch whose step, at the trace's mean
  context (input + half the output), stays within the TPOT SLA, the batch limit and the KV memory;
  its tokens per second over the mean output length. A P90 TPOT bound lets some steps run
  longer, so this is optimistic only on average: the pruning keeps a MARGIN for it.
- a pool whose instance cannot hold the model's weights gets rate 0 (the simulator refuses it).
A split is pruned when its bound is below (1 - MARGIN) x the best capacity simulated so far: it
cannot win. The bounds need the roofline model; with a calibrated one nothing is pruned."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pddbench.schema.scenario import Scenario

MARGIN = 0.10  # a bound this far below the best simulated capacity prunes (the decode bound is a mean)


@dataclass(frozen=True)
class Profile:
    """The trace's per-request work, the same for every split."""
    uncached: np.ndarray      # tokens each request must prefill (ideal cache)
    pairs: np.ndarray         # its attention pairs: uncached x (cached + uncached / 2)
    mean_output: float
    mean_context: float       # a decoding sequence's mean KV tokens


def profile(sc: Scenario) -> Profile:
    from pddbench.workload.hitrate import hit_tokens
    from pddbench.workload.source import workload_requests

    reqs = workload_requests(sc)
    inp = np.fromiter((r.input_length for r in reqs), dtype=np.float64, count=len(reqs))
    out = np.fromiter((r.output_length for r in reqs), dtype=np.float64, count=len(reqs))
    hit = np.minimum(hit_tokens(reqs, sc.workload.block_size), inp - 1).astype(np.float64)
    new = inp - hit
    return Profile(new, new * (hit + new / 2), float(out.mean()), float((inp + out / 2).mean()))


def _pool(sc: Scenario, role: str, v: dict):
    pool = getattr(sc.deployment, role).model_copy(update={"instances": v["instances"],
                                                            "chips_per_instance": v["chips_per_instance"]})
    return pool


def _fits(sc: Scenario, pool) -> bool:
    m, chip = sc.model, sc.chips[pool.chip]
    return pool.chips_per_instance * chip.memory_gb * 1e9 * pool.kv_memory_fraction > m.params_total_b * 1e9 * m.weight_bytes_per_param


def prefill_rps(sc: Scenario, pool, prof: Profile) -> float:
    from pddbench.sim.cluster import latency_model

    lat = latency_model(sc, pool)
    # both terms are linear in tokens and pairs: the mean request's time is the mean of the times
    ms = lat._compute_ms(float(prof.uncached.mean()), float(prof.pairs.mean())) + lat.comm_ms(float(prof.uncached.mean()))
    return pool.instances * 1000.0 / float(ms) if ms > 0 else float("inf")


def decode_tokens_per_s(sc: Scenario, pool, prof: Profile) -> float:
    from pddbench.sim.cluster import kv_capacity_tokens, latency_model

    lat = latency_model(sc, pool)
    by_memory = int(kv_capacity_tokens(sc, pool, "decode") // max(prof.mean_context, 1.0))
    top = min(pool.max_batch_seqs, by_memory)
    step = lambda b: lat.decode_ms(b, b * prof.mean_context)
    if top < 1 or step(1) > sc.sla.tpot_ms:
        return 0.0
    lo, hi = 1, top  # the largest batch whose step meets the TPOT bound (step time rises with the batch)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if step(mid) <= sc.sla.tpot_ms else (lo, mid - 1)
    return pool.instances * lo * 1000.0 / step(lo)


def bound(sc: Scenario, split: dict, prof: Profile) -> dict:
    """The split's upper bound in req/s and the pool that sets it (or why it is 0)."""
    pools = {r: _pool(sc, r, v) for r, v in split.items()}
    unfit = [r for r, p in pools.items() if not _fits(sc, p)]
    if unfit:
        return {"bound_rps": 0.0, "limit": f"{unfit[0]}: the weights do not fit in {pools[unfit[0]].chips_per_instance} chips"}
    rates = {"prefill": prefill_rps(sc, pools["prefill"], prof)}
    decoders = [r for r in pools if r != "prefill"]
    tokens = sum(decode_tokens_per_s(sc, pools[r], prof) for r in decoders)
    rates["+".join(decoders)] = tokens / prof.mean_output if prof.mean_output > 0 else float("inf")
    limit = min(rates, key=rates.get)
    return {"bound_rps": round(rates[limit], 6), "limit": limit}


def can_bound(sc: Scenario) -> bool:
    return sc.latency.kind == "roofline" and sc.model is not None
