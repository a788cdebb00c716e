import pytest

from pddbench.core.errors import UserError
from pddbench.reproduce.ledger import Claim, Row, verdict
from pddbench.reproduce.ledger_report import README_END, README_START, report_html, update_readme


def test_verdicts():
    change = Claim("ttft", "TTFT", -51.5, "%", "change", tolerance=10)
    assert verdict(change, -45.0) == "reproduced"
    assert verdict(change, -20.0) == "same sign only"
    assert verdict(change, -20.0, (-25.0, -15.0)) == "same sign only"
    # a mean on the article's side with seeds on both sides of zero is no sign at all
    assert verdict(change, -0.4, (-0.8, +0.9)) == "not reproduced"
    assert verdict(change, +7.0) == "not reproduced"
    assert verdict(change, None) == "not measurable"
    rng = Claim("cost", "cost", (-7.1, -3.5), "%", "range")
    assert verdict(rng, -5.3) == "reproduced" and verdict(rng, -1.0) == "not reproduced"
    value = Claim("share", "RLD share", 0.062, "share", "value", tolerance=0.02)
    assert verdict(value, 0.068) == "reproduced" and verdict(value, 0.2) == "not reproduced"


def test_row_spread_and_json():
    row = Row(Claim("x", "x", 1.0, "s", "value", tolerance=0.5), values=[1.2, 0.8, float("nan")])
    assert row.mean == pytest.approx(1.0) and row.spread == (0.8, 1.2)
    assert row.to_json()["verdict"] == "reproduced" and row.to_json()["seeds"] == 3


def test_readme_section_is_replaced_between_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{README_START}\nold\n{README_END}\noutro\n")
    rows = [Row(Claim("x", "a figure", 2.0, "s", "value", tolerance=0.1), values=[2.05])]
    update_readme(readme, rows, "context line")
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith("outro\n") and "old" not in text
    assert "a figure" in text and "reproduced" in text and "context line" in text
    readme.write_text("no markers")
    with pytest.raises(UserError):
        update_readme(readme, rows, "c")


def test_html_is_self_contained(tmp_path):
    png = tmp_path / "f.png"
    png.write_bytes(b"\x89PNG fake")
    rows = [Row(Claim("x", "<b>fig</b>", None, "s", "value"), note="no data")]
    out = report_html(rows, "ctx", [("fig", png)])
    assert "data:image/png;base64," in out and "&lt;b&gt;fig&lt;/b&gt;" in out and "not measurable" in out
