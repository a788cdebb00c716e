import json

import pytest

from pddbench.core.errors import InputError
from pddbench.workload.trace import Request, load_trace, write_trace
from tests.conftest import run_cli

GOOD = {"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [1, 2]}


def _write(tmp_path, lines):
    p = tmp_path / "t.jsonl"
    p.write_text("".join((l if isinstance(l, str) else json.dumps(l)) + "\n" for l in lines))
    return p


@pytest.mark.parametrize("bad,field,fragment", [
    ("{not json", None, "not valid JSON"),
    ({**GOOD, "input_length": -5}, "input_length", ">= 0"),
    ({k: v for k, v in GOOD.items() if k != "output_length"}, "output_length", "missing"),
    ({k: v for k, v in GOOD.items() if k != "hash_ids"}, "hash_ids", "missing"),
    ({**GOOD, "hash_ids": [1, 2, 3]}, "hash_ids", "ceil(1000/512) = 2"),
    ({**GOOD, "hash_ids": [1, "x"]}, "hash_ids", "non-negative integers"),
    ({**GOOD, "timestamp": "soon"}, "timestamp", "integer"),
    ({**GOOD, "output_length": 10**9}, "output_length", "absurdly large"),
    ({**GOOD, "input_length": 0, "hash_ids": []}, "input_length", ">= 1"),
    ([1, 2], None, "JSON object"),
])
def test_malformed_line_names_file_line_field(tmp_path, bad, field, fragment):
    path = _write(tmp_path, [GOOD, bad])
    with pytest.raises(InputError) as exc:
        load_trace(path)
    assert exc.value.line == 2
    assert exc.value.field == field
    assert fragment in str(exc.value)
    assert str(path) in str(exc.value)


def test_timestamps_out_of_order(tmp_path):
    path = _write(tmp_path, [{**GOOD, "timestamp": 10}, {**GOOD, "timestamp": 9}])
    with pytest.raises(InputError) as exc:
        load_trace(path)
    assert (exc.value.line, exc.value.field) == (2, "timestamp")


def test_block_size_changes_expected_hash_count(tmp_path):
    path = _write(tmp_path, [{**GOOD, "hash_ids": [1, 2, 3, 4]}])
    assert load_trace(path, block_size=256)[0].hash_ids == [1, 2, 3, 4]
    with pytest.raises(InputError):
        load_trace(path, block_size=512)


def test_round_trip_keeps_optional_fields(tmp_path):
    reqs = [Request(0, 600, 3, [5, 6], 1, 0), Request(4, 10, 1, [7])]
    write_trace(tmp_path / "o.jsonl", reqs)
    assert load_trace(tmp_path / "o.jsonl") == reqs


def test_cli_refuses_bad_trace_without_traceback(tmp_path):
    path = _write(tmp_path, [GOOD, GOOD, {**GOOD, "hash_ids": [1]}])
    res = run_cli("trace", "stats", path)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert f"{path}:3" in res.stderr.replace("\n", "") and "hash_ids" in res.stderr


def test_cli_missing_file(tmp_path):
    res = run_cli("trace", "stats", tmp_path / "nope.jsonl")
    assert res.returncode == 2 and "no such trace file" in res.stderr and "Traceback" not in res.stderr


def test_failed_write_leaves_no_file(tmp_path):
    class Boom(Request):
        def to_json(self):
            raise RuntimeError("disk on fire")

    out = tmp_path / "x.jsonl"
    with pytest.raises(RuntimeError):
        write_trace(out, [Request(0, 1, 1, [1]), Boom(0, 1, 1, [1])])
    assert list(tmp_path.iterdir()) == []
