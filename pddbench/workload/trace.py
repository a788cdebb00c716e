"""Mooncake-format JSONL traces: strict loading (errors name file, line, field) and writing.

One JSON object per line: `timestamp` (ms from trace start, non-decreasing), `input_length`,
`output_length`, `hash_ids` (one chained hash per `block_size`-token block, so
len(hash_ids) == ceil(input_length / block_size)); optional `session_id` and `turn`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from pddbench.core.errors import InputError
from pddbench.core.io import atomic_path
from pddbench.core.loading import is_stdin, loads_json, open_text

DEFAULT_BLOCK_SIZE = 512
# Sizes past these are corrupt data, not workloads (10M-token prompts, 1M-token outputs).
MAX_INPUT_TOKENS = 10_000_000
MAX_OUTPUT_TOKENS = 1_000_000
MAX_ID = 2**63 - 1  # ids and timestamps are stored as int64
# A trace spans at most a year: epoch-millisecond timestamps beside small ones, or enormous gaps,
# are corrupt data that would make the simulator and `trace stats` walk through decades.
MAX_SPAN_MS = 366 * 86_400_000


@dataclass(slots=True)
class Request:
    timestamp_ms: int
    input_length: int
    output_length: int
    hash_ids: list[int]
    session_id: int | None = None
    turn: int | None = None

    def to_json(self) -> str:
        obj: dict = {
            "timestamp": self.timestamp_ms,
            "input_length": self.input_length,
            "output_length": self.output_length,
            "hash_ids": self.hash_ids,
        }
        if self.session_id is not None:
            obj["session_id"] = self.session_id
        if self.turn is not None:
            obj["turn"] = self.turn
        return json.dumps(obj, separators=(", ", ": "))


def _int_field(obj: dict, field: str, path: str, line: int, *, required: bool = True,
               maximum: int = MAX_ID) -> int | None:
    if field not in obj:
        if required:
            raise InputError(path, "is missing", line, field)
        return None
    value = obj[field]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(path, f"must be an integer, got {value!r}", line, field)
    if value < 0:
        raise InputError(path, f"must be >= 0, got {value}", line, field)
    if value > maximum:
        raise InputError(path, f"is absurdly large ({value} > {maximum})", line, field)
    return value


def parse_request(text: str, path: str, line: int, block_size: int) -> Request:
    obj = loads_json(text, path, line)
    if not isinstance(obj, dict):
        raise InputError(path, "must be a JSON object", line)
    ts = _int_field(obj, "timestamp", path, line)
    inp = _int_field(obj, "input_length", path, line, maximum=MAX_INPUT_TOKENS)
    out = _int_field(obj, "output_length", path, line, maximum=MAX_OUTPUT_TOKENS)
    if inp == 0:
        raise InputError(path, "must be >= 1 (a request needs a prompt)", line, "input_length")
    if "hash_ids" not in obj:
        raise InputError(path, "is missing", line, "hash_ids")
    ids = obj["hash_ids"]
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) and 0 <= h <= MAX_ID
                                            for h in ids):
        raise InputError(path, "must be a list of non-negative integers below 2**63", line, "hash_ids")
    expected = math.ceil(inp / block_size)
    if len(ids) != expected:
        raise InputError(
            path,
            f"has {len(ids)} ids but input_length {inp} needs ceil({inp}/{block_size}) = {expected}"
            " (is --block-size right?)",
            line,
            "hash_ids",
        )
    session = _int_field(obj, "session_id", path, line, required=False)
    turn = _int_field(obj, "turn", path, line, required=False)
    return Request(ts, inp, out, ids, session, turn)


def load_trace(path: str | Path, block_size: int = DEFAULT_BLOCK_SIZE) -> list[Request]:
    """Load and validate a whole trace (plain, gzip or zstd; `-` is standard input); raise
    InputError on the first bad line."""
    path = Path(path)
    name = "<stdin>" if is_stdin(path) else str(path)
    requests: list[Request] = []
    parents: dict[int, int | None] = {}
    with open_text(path, "trace file", allow_stdin=True) as fh:
        for line_no, text in enumerate(fh, start=1):
            if text.strip():
                requests.append(_next_request(text, name, line_no, block_size, requests))
                _check_chained(requests, parents, name, line_no)
    if not requests:
        raise InputError(name, "holds no requests")
    return requests


def _next_request(text: str, path: str, line_no: int, block_size: int, before: list[Request]) -> Request:
    req = parse_request(text, path, line_no, block_size)
    if before and req.timestamp_ms < before[-1].timestamp_ms:
        raise InputError(path, f"goes back in time ({req.timestamp_ms} < previous {before[-1].timestamp_ms}); "
                         "traces must be sorted by timestamp", line_no, "timestamp")
    if before and req.timestamp_ms - before[0].timestamp_ms > MAX_SPAN_MS:
        raise InputError(path, f"is {req.timestamp_ms - before[0].timestamp_ms} ms after the first request's; a "
                         f"trace may span at most {MAX_SPAN_MS} ms (366 days): are timestamps milliseconds from "
                         "the trace's start?", line_no, "timestamp")
    return req


def _check_chained(requests: list[Request], parents: dict, path: str, line_no: int) -> None:
    """Block ids must be chained prefix hashes (as vLLM's and Mooncake's are): an id always follows
    the same id. The prefix cache relies on it (a held block implies its whole prefix is held).
    `parents`: id -> the id before it, filled here from the last request."""
    hash_ids = requests[-1].hash_ids
    prevs = [None, *hash_ids[:-1]]
    firsts = list(map(parents.setdefault, hash_ids, prevs))  # in C: the common case is all equal
    if firsts == prevs:
        return
    i = next(i for i, (a, b) in enumerate(zip(firsts, prevs)) if a != b)
    h = hash_ids[i]
    earlier = next(n for n, r in enumerate(requests, start=1) if h in r.hash_ids)  # requests, not lines
    raise InputError(path, f"block id {h} (hash_ids[{i}]) follows {prevs[i]} here but {firsts[i]} in request "
                     f"{earlier} of the file: hash_ids must be chained prefix hashes, where an id stands for its "
                     "block and every block before it (hash each block with its parent's id)", line_no, "hash_ids")


MAX_SIMULATED_SPAN_MS = 10 * MAX_SPAN_MS  # what a rate_scale below 1 may stretch a trace to


def check_simulated_span(reqs: list[Request], rate_scale: float, source: str) -> None:
    """Arrivals divided by rate_scale must stay within MAX_SIMULATED_SPAN_MS."""
    raw = reqs[-1].timestamp_ms - reqs[0].timestamp_ms
    span = raw / rate_scale
    if span <= MAX_SIMULATED_SPAN_MS:
        return
    limit = f"at most {MAX_SIMULATED_SPAN_MS} ms (about 10 years) can be simulated"
    if raw <= MAX_SIMULATED_SPAN_MS:  # the scale stretched arrivals that fit: the scale is the cause
        raise InputError(source, f"rate_scale {rate_scale:g} stretches the arrivals ({raw:.3g} ms) to {span:.3g} ms; "
                         f"{limit}: raise workload.rate_scale", field="workload.rate_scale")
    raise InputError(source, f"the workload's {len(reqs):,} arrivals span {raw:.3g} ms before any rate_scale; {limit}: "
                     "raise the arrival rate (workload.synth.rate_rps or workload.fixed.rate_rps), use a trace with "
                     f"shorter gaps, or speed it up with workload.rate_scale above {raw / MAX_SIMULATED_SPAN_MS:.3g}",
                     field="workload")


def write_trace(path: str | Path, requests: Iterable[Request]) -> None:
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as fh:
        for req in requests:
            fh.write(req.to_json())
            fh.write("\n")
