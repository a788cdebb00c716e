# cython: annotation_typing=False
"""Agentic multi-turn workload generator that targets a prefix-hit-rate histogram.

The model of agent behaviour:
- Agents of a few types, each with a shared system prompt (whole blocks, shared by every session
  of that type, so a new session still hits on it once the type has been seen).
- Sessions arrive as a Poisson process; each runs a geometric number of turns separated by a
  think/tool time (lognormal) plus the time to generate the previous reply.
- Each turn re-sends the session's context plus appended tokens (the model's reply and the tool's
  output). Small appends give the high-hit turns that dominate agentic traffic; a big tool output
  (a file read, a search dump) or a context compaction (the context replaced by system prompt +
  summary) gives the low-hit ones; compaction is forced when the context would pass its cap.
- Singular flows (very long fresh input, very short output) thinned into the stream at their share.
- A session whose next turn could only land in buckets already over target ends instead (users
  do abandon or restart sessions); this keeps skewed targets reachable.
- Output lengths are lognormal (median 250, ~74% under 500 tokens), capped.
- Stationary from the first request: the session process runs for a warm-up span first
  (`warmup_s`; by default WARMUP_LIFETIMES = 3 expected session lifetimes, 654 s of model time
  with the default knobs, in which about 1,340 requests are generated and dropped) and emits
  nothing during it. Started empty, the population is all opening turns and short contexts and
  needs a few lifetimes to reach its steady mix: without the warm-up a trace's lengths drifted
  with its request count (mean input 23.5k tokens at 1,000 requests, 26.5k at 12,000), so a
  capacity measured on n requests was not the one on 2n. At the warm-up's end the block-id
  memory and the bucket counts start afresh (the hit rates stay those of an ideal cache
  replaying the emitted trace alone, and its histogram the target) and the ~40 sessions in
  flight carry over, re-entering over the first session lifetime, each with a cold first turn
  (_end_warmup, _carried_turn). Timestamps are shifted so the trace starts at 0. `warmup_s: 0`
  is the generator without a warm-up, byte for byte.

How the histogram is hit: the generator tracks every block id it has emitted, which is exactly the
ideal cache `trace stats` replays, so it knows each turn's hit rate before emitting it. Each turn
draws its bucket from the target restricted to the buckets its session can reach; when a bucket
falls two or more requests behind its target share, that bucket is taken instead. Then the append
size is drawn to land inside the bucket. All randomness comes from one seeded random.Random.
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Iterator

from pydantic import BaseModel, Field, field_validator, model_validator

from pddbench.workload.hitrate import HIST_EDGES_PCT, N_BUCKETS, bucket_of
from pddbench.workload.trace import Request

PDD_LIKE_HIST = (0.10, 0.03, 0.07, 0.15, 0.15, 0.20, 0.30)
MOONCAKE_LIKE_HIST = (0.58, 0.03, 0.02, 0.07, 0.07, 0.09, 0.14)
THINK_SIGMA = 0.9  # of the lognormal think/tool time between turns
REPLY_S_PER_TOKEN = 0.03  # a turn also waits for the previous reply to be generated
# The default warm-up, in expected session lifetimes. Started empty, the population lacks the
# sessions older than the time run so far: after 3 lifetimes the turn-index and length mix are
# the steady ones within the seed-to-seed noise, and 5 or 8 measured no better (means over 40
# seeds); tests/test_synth.py holds 4,000- and 24,000-request traces together.
WARMUP_LIFETIMES = 3.0


class SynthConfig(BaseModel):
    """Knobs of the agentic generator (all have defaults that mimic coding/tool agents)."""

    model_config = {"extra": "forbid", "allow_inf_nan": False}

    requests: int = Field(1000, ge=1, le=10_000_000, description="requests to generate")
    seed: int = Field(0, description="seed of every random choice")
    target_hist: tuple[float, ...] = Field(PDD_LIKE_HIST, description="fractions per hit bucket")
    rate_rps: float = Field(4.0, ge=1e-6, le=1e6, description="mean request arrival rate")
    block_size: int = Field(512, ge=1, le=1_000_000)
    singular_share: float = Field(0.035, ge=0, le=1, description="share of singular flows")
    singular_input_tokens: tuple[int, int] = (32_768, 98_304)
    singular_output_tokens: tuple[int, int] = (1, 8)
    system_prompt_blocks: tuple[int, ...] = Field((16, 24, 32, 48), description="per agent type")
    mean_turns: float = Field(12.0, ge=1, le=1e6)
    think_time_median_s: float = Field(3.0, ge=1e-6, le=1e7)
    max_context_tokens: int = Field(131_072, ge=4096, le=1_000_000_000)
    output_median_tokens: float = Field(250.0, ge=1e-6, le=1e7)
    output_sigma: float = Field(1.1, ge=0, le=10)
    max_output_tokens: int = Field(8192, ge=1, le=10_000_000)
    min_append_tokens: int = Field(16, ge=1, le=10_000_000, description="smallest user/tool message")
    warmup_s: float | None = Field(
        None, ge=0, le=86_400,
        description="seconds the session process runs, emitting nothing, before the first request, so the "
                    "trace starts from the steady session mix and its lengths do not drift with the request "
                    "count; model time (think_time_median_s's clock, before the rescale to rate_rps). null: "
                    "3 expected session lifetimes (derived_warmup_s: 654 s with the default knobs). "
                    "0: no warm-up, the first request is the first session's opening turn")

    @field_validator("target_hist")
    @classmethod
    def _hist(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if len(v) != N_BUCKETS:
            raise ValueError(f"needs {N_BUCKETS} fractions (buckets {HIST_EDGES_PCT}), got {len(v)}")
        if any(not math.isfinite(f) or f < 0 for f in v):
            raise ValueError("fractions must be finite and >= 0")
        if abs(sum(v) - 1.0) > 1e-3:
            raise ValueError(f"fractions must sum to 1, got {sum(v):.4f}")
        return tuple(f / sum(v) for f in v)

    @model_validator(mode="after")
    def _singular_fits(self) -> "SynthConfig":
        if self.singular_share > self.target_hist[0] + 1e-9:
            raise ValueError(
                f"singular_share {self.singular_share} exceeds the 0-90% bucket target "
                f"{self.target_hist[0]}: singular flows are low-hit requests; lower one or raise the other")
        lo, hi = self.singular_input_tokens
        if not 1 <= lo <= hi:
            raise ValueError("singular_input_tokens must be (lo, hi) with 1 <= lo <= hi")
        return self


# Module functions, not SynthConfig methods: compiled by Cython, a method is a cyfunction, which
# pydantic takes for an unannotated field.
def mean_output_tokens(cfg: SynthConfig) -> float:
    """E[min(X, max_output_tokens)] of the lognormal output length X (rounding ignored)."""
    mu, sigma, cap = math.log(cfg.output_median_tokens), cfg.output_sigma, cfg.max_output_tokens
    if sigma == 0:
        return min(cfg.output_median_tokens, cap)
    z = (math.log(cap) - mu) / sigma
    return math.exp(mu + sigma * sigma / 2) * _phi(z - sigma) + cap * (1.0 - _phi(z))


def _phi(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def session_lifetime_s(cfg: SynthConfig) -> float:
    """Expected session lifetime in model seconds: mean_turns x (mean think time + the time to
    generate the mean reply). An upper estimate: the bucket controller ends some sessions early."""
    think_mean_s = cfg.think_time_median_s * math.exp(THINK_SIGMA ** 2 / 2)
    return cfg.mean_turns * (think_mean_s + REPLY_S_PER_TOKEN * mean_output_tokens(cfg))


def derived_warmup_s(cfg: SynthConfig) -> float:
    """The warm-up used when warmup_s is None: WARMUP_LIFETIMES expected session lifetimes."""
    return WARMUP_LIFETIMES * session_lifetime_s(cfg)


def warmup_span_s(cfg: SynthConfig) -> float:
    """The warm-up this config runs: warmup_s, or the derived one when that is None."""
    return derived_warmup_s(cfg) if cfg.warmup_s is None else float(cfg.warmup_s)


_NV_MAGICCONST = 4 * math.exp(-0.5) / math.sqrt(2.0)


class _Draws(random.Random):
    """random.Random with the three draws made per request written out lean: CPython's own
    algorithms, so the same seed gives the same values and leaves the same stream
    (tests/test_synth.py holds them to the stdlib's). The stdlib's argument handling around them
    was about a fifth of generating 100,000 requests."""

    def randint(self, a: int, b: int) -> int:
        n = b - a + 1  # randrange(a, b + 1) -> a + _randbelow(n), by getrandbits
        if n <= 0:
            raise ValueError(f"empty range for randint({a}, {b})")
        k = n.bit_length()
        r = self.getrandbits(k)
        while r >= n:
            r = self.getrandbits(k)
        return a + r

    def lognormvariate(self, mu: float, sigma: float) -> float:
        rand = self.random  # normalvariate: Kinderman and Monahan's ratio of uniforms
        while True:
            u1 = rand()
            u2 = 1.0 - rand()
            z = _NV_MAGICCONST * (u1 - 0.5) / u2
            if z * z / 4.0 <= -math.log(u2):
                return math.exp(mu + z * sigma)

    def weighted_choice(self, population: list, weights: list[float]):
        """choices(population, weights)[0] for positive weights."""
        cum = list(accumulate(weights))
        return population[bisect(cum, self.random() * (cum[-1] + 0.0), 0, len(population) - 1)]


@dataclass(slots=True)
class _Session:
    sid: int
    agent: int
    turns_left: int
    turn: int = 0
    prefix_ids: list[int] = field(default_factory=list)  # full blocks the next turn re-sends
    context_tokens: int = 0  # the previous turn's prompt: the next one re-sends all of it
    carried: bool = False  # in flight at the warm-up's end: its next turn finds its context uncached


class _Generator:
    def __init__(self, cfg: SynthConfig):
        self.cfg = cfg
        self.rng = _Draws(cfg.seed)
        self.seen: set[int] = set()
        self.next_id = 0
        self.counts = [0] * N_BUCKETS
        self.emitted = 0
        self.sys_ids = [self._new_ids(n) for n in cfg.system_prompt_blocks]
        self.next_sid = 0
        # buckets a turn may be put in: those with a target share, and 0 (the low-hit fallback)
        self.targeted = [b for b in range(N_BUCKETS) if cfg.target_hist[b] > 0 or b == 0]

    def _new_ids(self, n: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return ids

    def _cached_blocks(self, ids: list[int]) -> int:
        if self.seen.issuperset(ids):  # the usual case (a session's own context), checked in C
            return len(ids)
        n = 0
        for h in ids:
            if h not in self.seen:
                break
            n += 1
        return n

    # -- bucket choice -------------------------------------------------------------------------
    def _length_ranges(self, cached_tok: int, context_tok: int) -> dict[int, tuple[int, int]]:
        """For each targeted bucket above 0 that this turn can reach: the input lengths
        L >= context + a message that put a turn with `cached_tok` cached tokens into it."""
        hundred_cached = 100 * cached_tok
        shortest = max(cached_tok, context_tok) + self.cfg.min_append_tokens
        longest = self.cfg.max_context_tokens
        ranges = {}
        for b in self.targeted:
            if b == 0:
                continue
            l_max = min(hundred_cached // HIST_EDGES_PCT[b], longest)  # hit >= the bucket's lower edge
            l_min = shortest
            if b < N_BUCKETS - 1:  # hit < the upper edge (the last bucket includes 100%)
                l_min = max(shortest, hundred_cached // HIST_EDGES_PCT[b + 1] + 1)
            if l_min <= l_max:
                ranges[b] = (l_min, l_max)
        return ranges

    def _choose_bucket(self, feasible: list[int]) -> int | None:
        """A bucket this turn can reach: the one furthest behind target when it is 2+ requests
        behind, else a draw by target share among those still under target. None: every
        reachable bucket is over target (the caller ends the session)."""
        target, counts = self.cfg.target_hist, self.counts
        n = self.emitted + 1
        deficits = [target[b] * n - counts[b] for b in feasible]
        # the largest deficit, the lowest bucket on ties (feasible is in increasing order)
        i_behind = deficits.index(max(deficits))
        if deficits[i_behind] >= 2.0:
            return feasible[i_behind]
        under = [b for b, d in zip(feasible, deficits) if d > 0 and target[b] > 0]
        if not under:
            return None
        return self.rng.weighted_choice(under, [target[b] for b in under])

    # -- request construction ------------------------------------------------------------------
    def _output_len(self) -> int:
        cfg = self.cfg
        x = self.rng.lognormvariate(math.log(cfg.output_median_tokens), cfg.output_sigma)
        return max(1, min(cfg.max_output_tokens, int(round(x))))

    def _emit(self, ts: int, input_len: int, out_len: int, prefix: list[int], sid: int | None,
              turn: int | None) -> Request:
        n_blocks = math.ceil(input_len / self.cfg.block_size)
        reuse = prefix[:n_blocks]
        ids = reuse + self._new_ids(n_blocks - len(reuse))
        # = _cached_blocks(ids): the new ids were never emitted, so the cached run ends within `reuse`
        hit = min(self._cached_blocks(reuse) * self.cfg.block_size, input_len)
        self.counts[bucket_of(hit, input_len)] += 1
        self.emitted += 1
        self.seen.update(ids)
        return Request(ts, input_len, out_len, ids, sid, turn)

    def _turn(self, ts: int, s: _Session) -> Request | None:
        cfg, bs = self.cfg, self.cfg.block_size
        sys_ids = self.sys_ids[s.agent]
        prefix = s.prefix_ids or sys_ids
        if s.carried:
            return self._carried_turn(ts, s, prefix, sys_ids)
        cached_tok = self._cached_blocks(prefix) * bs
        prefix = prefix[: cached_tok // bs]  # blocks past a miss are recomputed anyway
        context_tok = s.context_tokens or cached_tok
        ranges = self._length_ranges(cached_tok, context_tok)
        feasible = [b for b in self.targeted if b == 0 or b in ranges]
        bucket = self._choose_bucket(feasible)
        if bucket is None and s.turn == 0:
            bucket = max(feasible)  # a session's opening turn always happens
        if bucket is None:
            return None  # every bucket this session can reach is over target: the session ends
        if bucket > 0:
            lo, hi = ranges[bucket]
            input_len = self.rng.randint(lo, hi)
        else:
            input_len, prefix = self._low_hit_turn(cached_tok, context_tok, prefix, sys_ids)
        return self._advance(s, self._emit(ts, input_len, self._output_len(), prefix, s.sid, s.turn))

    def _advance(self, s: _Session, req: Request) -> Request:
        s.prefix_ids = req.hash_ids[: req.input_length // self.cfg.block_size]
        s.context_tokens = req.input_length
        s.turn += 1
        s.turns_left -= 1
        return req

    def _carried_turn(self, ts: int, s: _Session, prefix: list[int], sys_ids: list[int]) -> Request:
        """The first emitted turn of a session in flight at the warm-up's end. Its context was
        emitted during the warm-up only, so any replay of the trace misses on it: the turn is
        made one of the model's low-hit turns (a big tool output or a compaction, drawn as the
        session's own would be with its context cached), and always happens. The controller then
        withholds as many of the population's later low-hit turns, so the sessions go through
        the steady number of tool outputs and compactions and the length mix stays the steady
        one. (Drawn as ordinary turns that merely miss, the withheld tool outputs left contexts
        short: mean input of the first 4,000 requests 2% below a 24,000-request trace's, p50 4%.)"""
        s.carried = False
        cached_tok = len(prefix) * self.cfg.block_size  # every id of a session's prefix was emitted
        input_len, prefix = self._low_hit_turn(cached_tok, s.context_tokens or cached_tok, prefix, sys_ids)
        return self._advance(s, self._emit(ts, input_len, self._output_len(), prefix, s.sid, s.turn))

    def _end_warmup(self, heap: list) -> None:
        """Forget the warm-up: nothing of it is in the trace, so neither the ideal cache nor the
        bucket counts may remember it. Sessions with a turn pending carry over, as many as the
        trace's low-hit budget can absorb (each one's first turn is a miss): the 0-90% bucket's
        share less the singular flows' and one cold system prompt per agent type. The others,
        a random choice, end here: only in a trace too short for the steady population's cold
        starts (under ~700 requests with the default knobs), whose histogram still has to match.
        Each carried session's next turn is put off by a uniform draw over one expected session
        lifetime, so the ~40 cold contexts arrive at about the rate of the model's own low-hit
        turns: all in their first think time (~25 s), they were a burst of full-context prefills
        and KV transfers that pushed cross-dc-pd's decode caches into a WAN overload it never
        left at the paper's rate (decode-cache hit 0.83 -> 0.39, TTFT p50 0.2 s -> ~90 s)."""
        cfg = self.cfg
        self.seen = set()
        self.counts = [0] * N_BUCKETS
        self.emitted = 0
        in_flight = sorted((e for e in heap if e[2] == "turn"), key=lambda e: e[:2])
        budget = max(0, int((cfg.target_hist[0] - cfg.singular_share) * cfg.requests) - len(self.sys_ids))
        if len(in_flight) > budget:
            ended = {id(in_flight[i][3]) for i in self.rng.sample(range(len(in_flight)), len(in_flight) - budget)}
            in_flight = [e for e in in_flight if id(e[3]) not in ended]
        reentry_ms = session_lifetime_s(cfg) * 1000
        heap[:] = [e for e in heap if e[2] != "turn"]
        for t, order, kind, s in in_flight:
            s.carried = True
            heap.append((int(round(t + self.rng.uniform(0, reentry_ms))), order, kind, s))
        heapq.heapify(heap)

    def _low_hit_turn(self, cached_tok: int, context_tok: int, prefix: list[int], sys_ids: list[int]):
        """A turn below 90% hit: a big tool output, or a compaction to system prompt + summary."""
        cfg, bs = self.cfg, self.cfg.block_size
        if cached_tok > 0 and self.rng.random() < 0.5:
            h = self.rng.uniform(0.2, 0.89)
            input_len = max(math.ceil(cached_tok / h), context_tok + cfg.min_append_tokens)
            if input_len <= cfg.max_context_tokens and 100 * cached_tok < 90 * input_len:
                return input_len, prefix
        sys_tok = len(sys_ids) * bs
        min_summary = max(cfg.min_append_tokens, sys_tok // 9 + 1)  # keeps hit under 90%
        hi = max(min_summary, min(max(8192, min_summary), cfg.max_context_tokens - sys_tok))
        summary = self.rng.randint(min(max(2048, min_summary), hi), hi)
        return sys_tok + summary, list(sys_ids)

    def _singular(self, ts: int) -> Request:
        lo, hi = self.cfg.singular_input_tokens
        olo, ohi = self.cfg.singular_output_tokens
        return self._emit(ts, self.rng.randint(lo, hi), self.rng.randint(olo, ohi), [], None, None)

    # -- arrivals ------------------------------------------------------------------------------
    def run(self) -> Iterator[Request]:
        cfg, rng = self.cfg, self.rng
        session_rate = cfg.rate_rps * (1 - cfg.singular_share) / cfg.mean_turns
        heap: list[tuple[int, int, str, _Session | None]] = []
        seq = 0
        singular = 0

        def push(t_ms: float, kind: str, s: _Session | None = None) -> None:
            nonlocal seq
            heapq.heappush(heap, (int(round(t_ms)), seq, kind, s))
            seq += 1

        push(0, "session")
        p_end = 1.0 / cfg.mean_turns
        warmup_ms = int(round(warmup_span_s(cfg) * 1000))
        warming = warmup_ms > 0  # 0: the first request is the first session's opening turn
        while warming or self.emitted < cfg.requests:
            t, order, kind, s = heapq.heappop(heap)
            if warming and t >= warmup_ms:  # put the event back: it is the trace's first, if it stays
                warming = False
                heapq.heappush(heap, (t, order, kind, s))
                self._end_warmup(heap)
                singular = 0
                continue
            if kind == "session":
                turns = 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - p_end)) if p_end < 1 else 1
                agent = rng.randrange(len(self.sys_ids))
                push(t, "turn", _Session(self.next_sid, agent, turns))
                self.next_sid += 1
                push(t + rng.expovariate(session_rate) * 1000, "session")
                continue
            assert s is not None
            # Singular flows are thinned into the stream at their exact share of requests.
            if singular < cfg.singular_share * (self.emitted + 1):
                singular += 1
                req = self._singular(t)
                if not warming:
                    yield req
                    if self.emitted >= cfg.requests:
                        break
            req = self._turn(t, s)
            if req is None:
                continue
            if not warming:
                yield req
            if s.turns_left > 0:
                think_s = rng.lognormvariate(math.log(cfg.think_time_median_s), THINK_SIGMA)
                push(t + (think_s + REPLY_S_PER_TOKEN * req.output_length) * 1000, "turn", s)


def synthesize(cfg: SynthConfig) -> list[Request]:
    """Generate the workload; timestamps are finally shifted to start at 0 (past the warm-up) and
    rescaled so the mean rate, (n - 1) gaps over the span, is cfg.rate_rps (ending sessions early
    thins the stream, so the raw rate runs below the nominal one)."""
    reqs = list(_Generator(cfg).run())
    start_ms = reqs[0].timestamp_ms
    span_ms = reqs[-1].timestamp_ms - start_ms
    factor = (len(reqs) - 1) / cfg.rate_rps * 1000 / span_ms if len(reqs) > 1 and span_ms > 0 else 1.0
    for r in reqs:
        r.timestamp_ms = int(round((r.timestamp_ms - start_ms) * factor))
    return reqs


def synth_trace(requests: int, seed: int, target_hist: str, rate_rps: float, singular_share: float,
                out=None) -> list[Request]:
    """`pddbench trace synth`: the options as typed (the histogram as comma-separated fractions),
    checked by SynthConfig; a bad value is reported as a UserError naming the option. `out`, the
    file the caller will write, is checked first."""
    from pydantic import ValidationError

    from pddbench.core.errors import UserError
    from pddbench.core.io import check_out_place

    if out is not None:
        check_out_place(out, "--out", folder=False)

    try:
        hist = tuple(float(x) for x in target_hist.split(","))
    except ValueError:
        raise UserError(f"--target-hist '{target_hist}': expected 7 comma-separated fractions, "
                        "e.g. 0.10,0.03,0.07,0.15,0.15,0.20,0.30") from None
    try:
        cfg = SynthConfig(requests=requests, seed=seed, target_hist=hist, rate_rps=rate_rps,
                          singular_share=singular_share)
    except ValidationError as exc:
        err = exc.errors()[0]
        option = "--" + "-".join(map(str, err["loc"])).replace("_", "-") if err["loc"] else "options"
        raise UserError(f"{option}: {err['msg'].removeprefix('Value error, ')}") from None
    return synthesize(cfg)
