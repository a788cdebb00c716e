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

from pddbench.errors import InputError
from pddbench.io import atomic_path

DEFAULT_BLOCK_SIZE = 512
# Sizes past these are corrupt data, not workloads (10M-token prompts, 1M-token outputs).
MAX_INPUT_TOKENS = 10_000_000
MAX_OUTPUT_TOKENS = 1_000_000


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
               maximum: int | None = None) -> int | None:
    if field not in obj:
        if required:
            raise InputError(path, "is missing", line, field)
        return None
    value = obj[field]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(path, f"must be an integer, got {value!r}", line, field)
    if value < 0:
        raise InputError(path, f"must be >= 0, got {value}", line, field)
    if maximum is not None and value > maximum:
        raise InputError(path, f"is absurdly large ({value} > {maximum})", line, field)
    return value


def parse_request(text: str, path: str, line: int, block_size: int) -> Request:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"is not valid JSON ({exc.msg} at column {exc.colno})", line) from None
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
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 0
                                            for h in ids):
        raise InputError(path, "must be a list of non-negative integers", line, "hash_ids")
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
    """Load and validate a whole trace; raise InputError on the first bad line."""
    path = Path(path)
    if not path.is_file():
        raise InputError(str(path), "no such trace file")
    requests: list[Request] = []
    last_ts = -1
    with path.open("r", encoding="utf-8") as fh:
        for line_no, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            req = parse_request(text, str(path), line_no, block_size)
            if req.timestamp_ms < last_ts:
                raise InputError(
                    str(path),
                    f"goes back in time ({req.timestamp_ms} < previous {last_ts}); traces must be"
                    " sorted by timestamp",
                    line_no,
                    "timestamp",
                )
            last_ts = req.timestamp_ms
            requests.append(req)
    if not requests:
        raise InputError(str(path), "holds no requests")
    return requests


def write_trace(path: str | Path, requests: Iterable[Request]) -> None:
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as fh:
        for req in requests:
            fh.write(req.to_json())
            fh.write("\n")
