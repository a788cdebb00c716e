"""Light against full reproduction (issue 27.1): pddbench/reproduce/agreement.py and the nightly's
`agreement` part, end to end on two real (tiny) reproduce runs."""

import json
import re

import pytest

from pddbench.core.errors import UserError
from pddbench.gate import nightly as nt
from pddbench.reproduce.agreement import disagreements, table, verdicts


def _doc(path, rows):
    path.write_text(json.dumps({"rows": rows}))
    return path


def test_disagreements_name_every_row_that_differs_or_is_missing():
    light = {"a": "reproduced", "b": "not reproduced", "c": "inconclusive"}
    full = {"a": "reproduced", "b": "same sign only", "d": "not measurable"}
    got = disagreements(light, full)
    assert got == [{"claim": "b", "light": "not reproduced", "full": "same sign only"},
                   {"claim": "c", "light": "inconclusive", "full": None},
                   {"claim": "d", "light": None, "full": "not measurable"}]
    assert disagreements(light, dict(light)) == []
    md = table(light, full)
    assert md.count("DISAGREE") == 3 and "| a | reproduced | reproduced |  |" in md


@pytest.mark.parametrize("content, field", [
    ("[]", "rows"), ('{"rows": []}', "rows"), ('{"rows": [{"id": "a"}]}', "rows[0]"),
    ('{"rows": [{"id": 1, "verdict": "x"}]}', "rows[0]"),
    ('{"rows": [{"id": "a", "verdict": "x"}, {"id": "a", "verdict": "y"}]}', "rows[1].id")])
def test_a_file_that_is_not_a_ledger_is_refused_naming_the_field(tmp_path, content, field):
    p = tmp_path / "reproduce.json"
    p.write_text(content)
    with pytest.raises(UserError, match="reproduce.json: field '" + re.escape(field)):
        verdicts(p)


def test_damaged_or_missing_files_are_input_errors(tmp_path):
    p = tmp_path / "reproduce.json"
    p.write_text('{"rows": [')
    with pytest.raises(UserError, match="reproduce.json"):
        verdicts(p)
    with pytest.raises(UserError, match="nothere"):
        verdicts(tmp_path / "nothere.json")


def test_nightly_part_refuses_a_bad_config(tmp_path):
    s = nt.Suite(tmp_path / "out", tmp_path / "b", tmp_path / "h", False, None)
    with pytest.raises(UserError, match="agreement.light"):
        nt.part_agreement(s, {"light": "--full", "full": []})


def test_nightly_part_runs_both_reproductions_and_compares_their_verdicts(tmp_path):
    """Two real reproduce runs (tiny: 40 requests; one seed against two, so the verdicts may differ;
    a tiny --full takes minutes on a slow host, and the nightly runs the real pair); the part's
    verdict case must fail exactly when the two reproduce.json files differ somewhere."""
    s = nt.Suite(tmp_path / "out", tmp_path / "b", tmp_path / "h", False, None)
    tiny = ["--requests", "40", "-j", "1"]
    nt.part_agreement(s, {"light": [*tiny, "--seeds", "1"], "full": [*tiny, "--seeds", "2"]})
    by = {c["name"]: c for c in s.cases}
    assert set(by) == {"light", "full", "verdicts"}, s.cases
    assert by["light"]["failure"] is None and by["full"]["failure"] is None
    runs = {m: next((s.out / "agreement" / m).glob("reproduce/*/reproduce.json")) for m in ("light", "full")}
    expected = disagreements(verdicts(runs["light"]), verdicts(runs["full"]))
    assert (by["verdicts"]["failure"] is not None) == bool(expected)
    for d in expected:
        assert d["claim"] in by["verdicts"]["failure"]
    assert "Light against full" in s.sections[0] and s.sections[0].count("DISAGREE") == len(expected)


def test_nightly_part_fails_when_a_reproduction_fails(tmp_path):
    s = nt.Suite(tmp_path / "out", tmp_path / "b", tmp_path / "h", False, None)
    nt.part_agreement(s, {"light": ["--seeds", "0"], "full": ["--full"]})
    assert [c["name"] for c in s.cases] == ["light"] and "exit 2" in s.cases[0]["failure"]
