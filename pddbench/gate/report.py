"""Gate outputs: markdown (what moved, by how much), JUnit XML (one test case per gated metric)
and JSON (everything)."""

from __future__ import annotations

import math
from xml.etree import ElementTree as ET

from pddbench.core.io import write_json, write_text

MARK = {"regression": "FAIL", "improved": "better", "within": "moved (within tolerance)", "moved": "moved (no rule)",
        "same": "same", "n/a": "n/a"}


def _num(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    a = abs(v)
    return f"{v:.4g}" if a < 1000 else f"{v:,.0f}"


def _pct(v) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def verdict_line(res: dict) -> str:
    if res["regressions"]:
        what = ", ".join(sorted({f"{r['subject']}: {r['metric']}" for r in res["rows"] if r["status"] == "regression"}))
        return f"FAIL: {res['regressions']} regression(s) ({what})"
    if res["mode"] == "exact" and not res["identical"]:
        return "PASS with changes: the candidate differs from the baseline within the rules (accept with --update-baseline)"
    return "PASS" + (": identical to the baseline" if res["identical"] else "")


def markdown(results: list[dict], title: str = "pddbench gate") -> str:
    lines = [f"# {title}", ""]
    for res in results:
        lines += [f"## {res['name']}: {verdict_line(res)}", "",
                  f"- mode: {res['mode']}; candidate `{res['candidate']}`; baseline `{res['baseline']}`"]
        lines += [f"- {n}" for n in res["notes"]]
        moved = [r for r in res["rows"] if r["status"] not in ("same", "n/a")]
        if moved:
            ci = res["mode"] == "statistical"
            head = "| subject | metric | baseline | candidate | change | " + ("interval of change | " if ci else "") + \
                "tolerance | rule | verdict |"
            lines += ["", head, "|" + " --- |" * (head.count(" | ") + 1)]
            order = {"regression": 0, "within": 1, "improved": 2}
            for r in sorted(moved, key=lambda r: (order.get(r["status"], 3), r["subject"], r["metric"])):
                cells = [r["subject"], f"`{r['metric']}`", _num(r["baseline"]), _num(r["candidate"]),
                         f"{_num(r['diff'])} ({_pct(r['diff_pct'])})"]
                if ci:
                    cells.append(f"[{_num(r['ci_lo'])}, {_num(r['ci_hi'])}]")
                cells += [_num(r["tolerance"]), r["rule"] or "-", MARK.get(r["status"], r["status"])]
                lines.append("| " + " | ".join(cells) + " |")
        elif not res["identical"]:
            lines.append("- no gated metric moved")
        if res.get("figures"):
            lines += [""] + [f"![{f['metric']}]({f['path']})" for f in res["figures"]]
        lines.append("")
    return "\n".join(lines)


def junit(results: list[dict], extra_cases: list[dict] | None = None) -> str:
    """One <testsuite> per comparison; one <testcase> per gated metric (a <failure> on a regression).
    `extra_cases`: {suite, name, failure (message or None), output} for non-gate checks (nightly)."""
    root = ET.Element("testsuites", name="pddbench-gate")
    suites: dict[str, list[ET.Element]] = {}
    for res in results:
        cases = suites.setdefault(res["name"], [])
        for r in res["rows"]:
            if r["status"] in ("moved", "same", "n/a") and not r["rule"]:
                continue
            case = ET.Element("testcase", classname=f"gate.{res['name']}", name=f"{r['subject']}: {r['metric']}")
            text = (f"baseline {_num(r['baseline'])}, candidate {_num(r['candidate'])}, change {_num(r['diff'])} "
                    f"({_pct(r['diff_pct'])}), tolerance {_num(r['tolerance'])} ({r['rule']})")
            if r["ci_lo"] is not None:
                text += f", interval [{_num(r['ci_lo'])}, {_num(r['ci_hi'])}]"
            if r["status"] == "regression":
                ET.SubElement(case, "failure", message=f"regression: {r['metric']}", type="regression").text = text
            else:
                ET.SubElement(case, "system-out").text = f"{r['status']}: {text}"
            cases.append(case)
        if not res["rows"]:
            case = ET.Element("testcase", classname=f"gate.{res['name']}", name="identical")
            cases.append(case)
    for extra in extra_cases or []:
        case = ET.Element("testcase", classname=extra["suite"], name=extra["name"])
        if extra.get("skipped"):
            ET.SubElement(case, "skipped", message=extra["skipped"])
        if extra.get("failure"):
            ET.SubElement(case, "failure", message=extra["failure"][:200], type="failure").text = extra["failure"]
        if extra.get("output"):
            ET.SubElement(case, "system-out").text = extra["output"]
        suites.setdefault(extra["suite"], []).append(case)
    for name, cases in suites.items():
        failures = sum(1 for c in cases if c.find("failure") is not None)
        suite = ET.SubElement(root, "testsuite", name=name, tests=str(len(cases)), failures=str(failures), errors="0")
        suite.extend(cases)
    root.set("tests", str(sum(len(c) for c in suites.values())))
    root.set("failures", str(sum(int(s.get("failures")) for s in root)))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_outputs(results: list[dict], markdown_path=None, junit_path=None, json_path=None, title="pddbench gate",
                  extra_cases=None) -> None:
    if markdown_path:
        write_text(markdown_path, markdown(results, title))
    if junit_path:
        write_text(junit_path, junit(results, extra_cases))
    if json_path:
        write_json(json_path, results if len(results) != 1 else results[0])
