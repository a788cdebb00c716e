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
    update_readme(readme, rows, "context line", ["**The answer**: one line"])
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith("outro\n") and "old" not in text
    assert "a figure" in text and "reproduced" in text and "context line" in text
    assert text.index("**The answer**") < text.index("context line") < text.index("a figure")
    readme.write_text("no markers")
    with pytest.raises(UserError):
        update_readme(readme, rows, "c", [])


def test_html_is_self_contained(tmp_path):
    png = tmp_path / "f.png"
    png.write_bytes(b"\x89PNG fake")
    rows = [Row(Claim("x", "<b>fig</b>", None, "s", "value"), note="no data")]
    out = report_html(rows, "ctx", [("fig", png)], ["**The answer** <x>:", "- a `cmd` line"])
    assert "data:image/png;base64," in out and "&lt;b&gt;fig&lt;/b&gt;" in out and "not measurable" in out
    assert "<b>The answer</b> &lt;x&gt;:" in out and "<li>a <code>cmd</code> line</li>" in out
    assert out.index("id='answer'") < out.index("<table>") < out.index("id='claim-x'")
    assert "href='#claim-x'" in out and "no data" not in out.split("<table>")[1].split("</table>")[0]


def _claim_row(cid, article, values, unsteady=""):
    return Row(Claim(cid, cid.replace("_", " "), article, "%", "change", tolerance=10), values=values,
               unsteady=unsteady)


def _map(rows):
    import pandas as pd

    return pd.DataFrame(rows, columns=["sla.tpot_ms", "network.wan", "throughput_change_pct", "ttft_change_pct"])


def test_the_answer_is_generated_from_rows_and_map():
    from pddbench.reproduce.answer import MAX_LINES, answer_lines

    rows = [_claim_row("throughput_change_best", 27.8, [-20.0, -10.0, -15.0]),
            _claim_row("ttft_change_best", -51.5, [-45.0, -50.0, -55.0]),
            _claim_row("bcr_change", 37.5, [5.0, 6.0, 7.0], unsteady="capacities from 1,000 requests; settle it"),
            _claim_row("cost_per_token_change", -37.5, [])]
    df = _map([[60, "10g", -30.0, 5.0], [60, "100g", -20.0, 4.0], [150, "10g", 12.0, -3.0], [150, "100g", 8.0, -1.0]])
    lines = answer_lines(rows, df, ["sla.tpot_ms", "network.wan"], 3, 1000, False, 400, 12_000)
    text = "\n".join(lines)
    assert len(lines) <= MAX_LINES and lines[0].startswith("**The answer** (light run: 3 seeds, 1,000 requests")
    assert "- Throughput change best: article +27.8 %, here -15.0 % (-20.0 % .. -10.0 % over 3 seeds): **not reproduced**" in text
    assert "here -50.0 %" in text and "**reproduced**" in text
    assert "**inconclusive**, because capacities from 1,000 requests" in text
    assert "- Cost per token change: not measured" in text
    assert "4 headline gains, under the shipped assumptions 1 hold, 0 only in direction, 1 do not, 2 cannot" in text
    # the map: the throughput gain is positive at 2 of 4 points, both at TPOT SLA 150
    assert "at 2 of 4 map points, most often where TPOT SLA (ms) = 150 (2 of 2 there)" in text
    assert "mean TTFT change goes the article's way (negative) at 2 of 4" in text
    assert "TPOT SLA (ms) 35 points, WAN line 3 points" in text  # 10 - (-25) and -6 - (-9)
    assert "1 of 4 rows inconclusive, e.g. capacities from 1,000 requests; settle it" in text
    assert "400-request points are indicative" in text
    checks = [{"deployment": "pdd", "requests": 12000, "requests_2n": 24000, "change_pct": -2.6, "converged": True},
              {"deployment": "same-dc-pd", "requests": 12000, "requests_2n": 24000, "change_pct": 4.0, "converged": False}]
    sure = answer_lines(rows, df, ["sla.tpot_ms"], 3, 1000, False, 400, 12_000, checks)[-1]
    assert "1 of 2 capacities converged (12,000 vs 24,000 requests, largest move same-dc-pd +4.0 %)" in sure


def test_the_answer_says_everywhere_and_nowhere():
    from pddbench.reproduce.answer import where_line

    df = _map([[60, "10g", -30.0, -5.0], [150, "10g", -2.0, -3.0]])
    assert "nowhere on the map (0 of 2 points)" in where_line(df, ["sla.tpot_ms"], "throughput_change_pct", "gain",
                                                                "positive")
    assert "everywhere on the map (2 points)" in where_line(df, ["sla.tpot_ms"], "ttft_change_pct", "ttft", "negative")
    assert "no map point" in where_line(_map([[60, "10g", None, None]]), ["sla.tpot_ms"], "throughput_change_pct",
                                        "gain", "positive")
