"""A fixed-shape workload for controlled experiments (e.g. the article's "64K total length, 1K
output, 90% prefix hit"): every request has the same input and output length and shares one
common prefix of hit_rate x input tokens (whole blocks); arrivals are Poisson."""

from __future__ import annotations

import random

from pydantic import BaseModel, Field

from pddbench.workload.trace import Request


class FixedConfig(BaseModel):
    model_config = {"extra": "forbid", "allow_inf_nan": False}
    requests: int = Field(500, ge=1, le=10_000_000)
    input_tokens: int = Field(64512, ge=1, le=10_000_000)
    output_tokens: int = Field(1024, ge=1, le=1_000_000)
    hit_rate: float = Field(0.9, ge=0, le=1, description="share of the prompt in the common prefix")
    rate_rps: float = Field(1.0, ge=1e-6, le=1e6)
    seed: int = 0


def fixed_requests(cfg: FixedConfig, block_size: int = 512) -> list[Request]:
    rng = random.Random(cfg.seed)
    n_blocks = -(-cfg.input_tokens // block_size)
    shared = min(n_blocks, int(cfg.hit_rate * cfg.input_tokens) // block_size)
    prefix = list(range(shared))
    next_id, t, out = shared, 0.0, []
    for i in range(cfg.requests):
        ids = prefix + list(range(next_id, next_id + n_blocks - shared))
        next_id += n_blocks - shared
        out.append(Request(int(round(t)), cfg.input_tokens, cfg.output_tokens, ids, i, 0))
        t += rng.expovariate(cfg.rate_rps) * 1000
    return out
