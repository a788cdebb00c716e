"""`pddbench reproduce`: the claims table covers every figure of the article, a tiny run writes the
ledger (one row per claim, a verdict each), and the map's words follow the map's signs."""

import json
import os

import pandas as pd
import pytest

from pddbench.reproduce.claims import BY_ID, CLAIMS
from pddbench.reproduce.ledger import VERDICTS
from pddbench.reproduce.sensitivity import describe_map

# Every figure of the article (pdd-brief.md) the ledger must carry, by claim id.
ARTICLE_FIGURES = {
    "70-80% of requests above 95% hit": ["hit_mix_mooncake", "hit_mix_generated"],
    "naive cross-DC P50 4.2 -> 6.7 s, P90 18.3 s, P99 29.7 s": [
        "same_dc_ttft_p50", "cross_dc_ttft_p50", "cross_dc_ttft_p50_inflation", "cross_dc_ttft_p90", "cross_dc_ttft_p99",
        "same_dc_ttft_p50_at_capacity", "cross_dc_ttft_p50_inflation_seconds"],
    "per-request WAN KV latency 1-20 s": ["wan_kv_latency_low", "wan_kv_latency_high"],
    "up to 10x less WAN bandwidth with the DRC": ["drc_wan_reduction"],
    "TTFT -51.5%": ["ttft_change", "ttft_change_regime", "ttft_change_best", "ttft_change_equal_prefill",
                    "ttft_change_common_light", "ttft_change_common_heavy"],
    "throughput within SLA +27.8%": ["throughput_change", "throughput_change_best", "throughput_change_equal_prefill"],
    "BCR up to +37.5%, cost per token -37.5%": ["bcr_change", "cost_per_token_change"],
    "hardware cost -3.5..-7.1%": ["hardware_cost_change"],
    "RLD token share 6.2%": ["relay_token_share"],
    "100-token handoff 4649 KB vs 1.5 KB; 185 / 512.6 / +24.5 ms vs 321.4 ms": [
        "handoff_kv_kb", "handoff_ids_kb", "handoff_wan_mean_ms", "handoff_wan_peak_ms", "handoff_copy_ms",
        "handoff_recompute_ms"],
    "One-Shot vs Catch-Up, ~64-token rule": ["catchup_stall_change", "catchup_relay_busy_change", "adaptive_catchup_share"],
    "P->RLD only collapses": ["relay_only_md_hit_gap", "relay_only_relay_share_change", "relay_only_ttft_p90_change"],
    "singular flows 3-4%": ["singular_share", "singular_wan_saved"],
    "bathtub, drops near 20% and 40%": ["bathtub_dip_20", "bathtub_dip_40", "bathtub_middle"],
}


def test_claims_cover_every_article_figure():
    for figure, ids in ARTICLE_FIGURES.items():
        for cid in ids:
            assert cid in BY_ID, f"{figure}: no claim {cid}"
    listed = {cid for ids in ARTICLE_FIGURES.values() for cid in ids}
    assert listed == set(BY_ID), "every claim belongs to an article figure"
    for c in CLAIMS:
        assert c.unit and c.depends_on, c.id
        assert c.kind in ("value", "change", "range")
        if c.kind == "range":
            assert isinstance(c.article, tuple) and c.article[0] <= c.article[1]
    values = {c.id: c.article for c in CLAIMS}
    assert values["ttft_change"] == -51.5 and values["throughput_change"] == 27.8
    assert values["cross_dc_ttft_p99"] == 29.7 and values["handoff_kv_kb"] == 4649.0
    assert values["relay_token_share"] == 0.062 and values["hardware_cost_change"] == (-7.1, -3.5)


def _map(sign_of):
    rows = []
    for tpot in (60, 150):
        for wan in ("cross-city-10g", "cross-city-100g"):
            for kv in (4400, 47606):
                rows.append({"sla.tpot_ms": tpot, "network.wan": wan, "model.kv_bytes_per_token": kv,
                             "gain": sign_of(tpot, wan, kv) * (5 + kv / 1e4)})
    return pd.DataFrame(rows)


AXES = ["sla.tpot_ms", "network.wan", "model.kv_bytes_per_token"]


def test_map_words_follow_the_signs():
    by_wan = describe_map(_map(lambda t, w, k: 1 if w.endswith("100g") else -1), AXES, "gain", "The gain")
    assert "positive at 4 of 8" in by_wan
    assert "WAN line alone decides the sign: positive at cross-city-100g, negative at cross-city-10g" in by_wan
    flipped = describe_map(_map(lambda t, w, k: -1 if w.endswith("100g") else 1), AXES, "gain", "The gain")
    assert "positive at cross-city-10g, negative at cross-city-100g" in flipped and flipped != by_wan
    by_kv = describe_map(_map(lambda t, w, k: 1 if k == 4400 else -1), AXES, "gain", "The gain")
    assert "KV bytes/token alone decides" in by_kv and "WAN line alone" not in by_kv
    everywhere = describe_map(_map(lambda t, w, k: 1), AXES, "gain", "The gain")
    assert "positive everywhere" in everywhere
    # no single axis decides: positive only where two conditions meet
    pair = describe_map(_map(lambda t, w, k: 1 if (t == 60 and k == 4400) else -1), AXES, "gain", "The gain")
    assert "positive at 2 of 8" in pair and "TPOT SLA (ms) = 60 and KV bytes/token = 4400" in pair
    assert describe_map(pd.DataFrame({"gain": [None]}), AXES, "gain", "X").endswith("could be measured.")


@pytest.fixture(scope="module")
def light_run(tmp_path_factory):
    """One tiny reproduce run (40 requests, 2 seeds) for the tests that read its output; on two
    workers, so the PrfaaS ledger runs beside the rest (tests/test_agreement.py runs -j 1)."""
    from pddbench.reproduce.job import reproduce
    from pddbench.reproduce.ledger_report import README_END, README_START

    tmp = tmp_path_factory.mktemp("reproduce")
    readme = tmp / "README.md"
    readme.write_text(f"# x\n## Simulated vs the article\n{README_START}\nOLD-TABLE-LINE\n{README_END}\nrest\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PDDBENCH_REPRODUCE_REQUESTS", "40")
        out = reproduce(tmp / "results", jobs=2, seeds=2, update_readme=readme)
    return out, readme


def test_light_reproduce_writes_the_ledger(light_run):
    from pddbench.core.loading import read_json

    out, readme = light_run
    data = read_json(out / "reproduce.json", "reproduce.json")  # strict: standard JSON, no NaN/Infinity
    assert [r["id"] for r in data["rows"]] == [c.id for c in CLAIMS]
    unbounded = [r for r in data["rows"] if isinstance(r["article"], list) and r["article"][1] is None]
    assert unbounded, "a claim whose range has no upper end writes it as null"
    assert all(r["verdict"] in VERDICTS for r in data["rows"])
    measured = [r for r in data["rows"] if r["id"] == "ttft_change"][0]
    assert measured["seeds"] == 2 and measured["simulated_mean"] is not None
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    for c in CLAIMS:
        assert c.figure.replace("|", "/") in md
    # the PDD ledger, then the PrfaaS ledger's own rows (its section: `pddbench designs` on the shipped spec)
    prfaas = data["prfaas"]["rows"]
    assert [r["id"] for r in prfaas] == ["prfaas_vs_homogeneous", "prfaas_vs_naive", "prfaas_p90_ttft", "prfaas_equal_cost"]
    assert all(r["verdict"] in VERDICTS and r["seeds"] == 2 for r in prfaas)
    assert "## The PrfaaS ledger" in md and (out / "prfaas" / "designs.json").is_file()
    assert (out / "prfaas" / "designs.png").is_file() and "prfaas (wall, beside)" in data["settings"]["worker_s_by_kind"]
    assert html.count("<tr class=") == len(CLAIMS) + len(prfaas) and "data:image/png;base64," in html
    # the answer first: at most ten lines, before the ledger, in the JSON, the markdown and the HTML
    answer = data["answer"]
    from pddbench.reproduce.answer import MAX_LINES

    assert 1 < len(answer) <= MAX_LINES and answer[0].startswith("**The answer** (light run: 2 seeds, 40 requests")
    assert md.split("\n")[2:2 + len(answer)] == answer and md.index(answer[-1]) < md.index("## The ledger")
    assert html.index("id='answer'") < html.index("<table>") and "**" not in html.split("id='answer'")[1][:2000]
    assert any("throughput within sla" in line.lower() and "**inconclusive**" in line for line in answer)
    # what the verdicts rest on: the model, the latency terms and their measured error on the H100
    basis = data["basis"]
    rests = next(line for line in answer if line.startswith("- What the verdicts rest on"))
    assert basis["model"]["name"] in rests and basis["roofline_check"]["chip"] == "h100"
    assert f"{100 * basis['roofline_check']['at_these_settings']['median_abs_error']:.1f} %" in rests
    for c in CLAIMS:  # every ledger line links to its details, and every link lands
        assert f"href='#claim-{c.id.replace('_', '-')}'" in html and f"id='claim-{c.id.replace('_', '-')}'" in html
    assert "req/s" in data["context"] and "Naive cross-DC TTFT p50/p90/p99" in data["context"]
    assert set(data["map_words"]) == {"throughput_change_pct", "ttft_change_pct"}
    text = readme.read_text()
    assert "OLD-TABLE-LINE" not in text and text.endswith("rest\n") and "throughput within SLA" in text
    for fig in ("article_vs_sim", "naive_cross_dc_cdf", "handoff_modes", "relay_only_drift", "bathtub", "common_load"):
        assert (out / "figures" / f"{fig}.png").is_file()
    _check_best_vs_best(out, data)
    # 40-request capacities are not steady-state evidence: no verdict rests on them
    for cid in ("throughput_change", "bcr_change", "cost_per_token_change", "throughput_change_best",
                "throughput_change_equal_prefill"):
        row = [r for r in data["rows"] if r["id"] == cid][0]
        assert row["verdict"] == "inconclusive" and "--requests" in row["unsteady"], row
    # each capacity claim records the n vs 2n check of the capacities it rests on (seed 0)
    conv = data["convergence"]
    assert conv["bound_pct"] == 3.0 and data["settings"]["verdict_capacity_requests"] == 40
    for cid in ("throughput_change", "throughput_change_best", "throughput_change_equal_prefill"):
        checks = conv["by_claim"][cid]
        # 40 requests, or 80 where the first check moved and the capacity was searched again
        assert len(checks) == 2 and all(c["requests"] in (40, 80) and c["requests_2n"] == 2 * c["requests"]
                                        for c in checks), checks


def test_light_reproduce_states_its_crossovers(light_run):
    """The light run's crossovers: every axis --full searches (chip B's price solved exactly from
    the best splits' seed-0 capacities, the offered load, each simulated axis and the model axis),
    none left as not searched, the simulations it did counted."""
    from pddbench.reproduce import crossovers as cx

    out, _ = light_run
    data = json.loads((out / "reproduce.json").read_text())
    items = data["crossovers"]
    assert {(i["claim"], i["axis"]) for i in items} >= {("bcr_change", cx.PRICE_AXIS),
                                                          ("ttft_change_common", cx.LOAD_AXIS)}
    assert {(i["claim"], i["axis"]) for i in items} >= {(c, a) for a in cx.AXES
                                                          for c in ("throughput_change_best", "bcr_change")}
    assert {i["model"] for i in items if i["axis"] == cx.MODEL_AXIS} == set(cx.axis_models())
    assert data["crossover_search"]["not_searched"] == [] and "frontier" not in data["crossover_search"]
    effort = data["crossover_search"]["settings"]
    assert effort["neighbour_checks"] > 0 and 0 < effort["warm_started_searches"] <= effort["capacity_searches"]
    best = {r["id"]: r for r in data["rows"]}
    caps = data["best_vs_best"]["capacities"]
    thr = [c[0]["throughput_within_sla_rps"] for c in (caps["best-pdd"], caps["best-same-dc-pd"])]
    price = next(i for i in items if i["axis"] == cx.PRICE_AXIS and i["claim"] == "bcr_change")
    if price["value"] is not None and all(thr):  # at that price PDD's BCR equals the baseline's
        pdd, same = caps["best-pdd"][0], caps["best-same-dc-pd"][0]
        chips_b = data["best_vs_best"]["measured"]["best-pdd"]["chips"]["B"]
        cost = pdd["cost_per_hour"] + chips_b * (price["value"] - 2.52)
        assert thr[0] / cost == pytest.approx(thr[1] / same["cost_per_hour"], rel=1e-6)
    assert "best_vs_best" in data and "throughput_change_best" in best
    assert any("changes sign" in line for line in data["answer"])
    assert not any("not searched in this run" in line for line in data["answer"])
    assert (out / "crossovers" / "crossovers.png").stat().st_size > 0


def test_a_row_on_unsteady_evidence_has_no_verdict():
    from pddbench.reproduce.claim_rows import row, unsteady, unsteady_reason

    short = [{"requests": 400, "min_requests": 12_000, "warnings": ["fewer than min_requests"]}]
    steady = [{"requests": 12_000, "min_requests": 12_000, "warnings": []}]
    assert unsteady_reason(steady) == ""
    settled = row("throughput_change", [30.0, 25.0])
    assert settled.verdict != "inconclusive"
    flagged = unsteady([row("throughput_change", [30.0, 25.0])], unsteady_reason(short + steady))[0]
    assert flagged.verdict == "inconclusive" and "400" in flagged.unsteady and "12000" in flagged.unsteady
    assert unsteady([row("throughput_change", [])], unsteady_reason(short))[0].verdict == "not measurable"


def test_a_capacity_that_moves_on_twice_the_requests_has_no_verdict():
    from pddbench.reproduce.claim_rows import convergence, row, unsteady, unsteady_reason

    cap = lambda rps, n: {"throughput_within_sla_rps": rps, "requests": n, "warnings": []}
    held = convergence("pdd", cap(9.5, 12_000), cap(9.25, 24_000))  # -2.6 %: within 3 %
    moved = convergence("same-dc-pd", cap(10.0, 12_000), cap(9.0, 24_000))  # -10 %
    zero = convergence("best-pdd", cap(0.0, 12_000), cap(0.5, 24_000))
    assert held["converged"] and held["change_pct"] == -2.63 and not moved["converged"] and not zero["converged"]
    assert convergence("x", cap(0.0, 1), cap(0.0, 2))["converged"]  # both 0 agree
    steady = [cap(9.5, 12_000)]
    assert unsteady_reason(steady, [held]) == ""
    why = unsteady_reason(steady, [held, moved])
    assert "same-dc-pd's capacity did not converge: 10.00 req/s on 12,000 requests, 9.00 on 24,000 (-10.0 %" in why
    assert "--requests 24000" in why
    assert "did not converge" in unsteady_reason(steady, [zero]) and "from a capacity of 0" in unsteady_reason(steady, [zero])
    assert "no convergence check" in unsteady_reason(steady, [held, None])
    assert unsteady([row("throughput_change", [5.0])], why)[0].verdict == "inconclusive"


def _check_best_vs_best(out, data):
    """Best split vs best split at the budgets, the control's prefill chips, the common loads' top
    and the regime load chosen below every measured capacity (issue 14.3 and 14.5)."""
    from pddbench.reproduce.best_vs_best import BUDGETS, prefill_chips

    rows = {r["id"]: r for r in data["rows"]}
    bvb = data["best_vs_best"]
    m = bvb["measured"]
    for name, dep in (("best-same-dc-pd", "same-dc-pd"), ("best-pdd", "pdd")):
        assert m[name]["split"] == bvb["search"][dep]["best"]["split"]
        assert all(m[name]["chips"][c] <= n for c, n in BUDGETS[dep].items())  # within its budget
        assert (out / "optimize" / dep / "optimize.json").is_file()
    assert BUDGETS == {"same-dc-pd": {"A": 88}, "pdd": {"A": 43, "B": 32}}
    # the best-vs-best rows compare exactly those splits, one value per seed
    for cid in ("ttft_change_best", "throughput_change_best", "ttft_change_equal_prefill",
                "throughput_change_equal_prefill"):
        assert rows[cid]["seeds"] == 2, cid
    assert m["best-pdd"]["label"] in rows["throughput_change_best"]["note"]
    assert m["best-same-dc-pd"]["label"] in rows["throughput_change_best"]["note"]
    caps = bvb["capacities"]
    same = [c["throughput_within_sla_rps"] for c in caps["best-same-dc-pd"]]
    pdd = [c["throughput_within_sla_rps"] for c in caps["best-pdd"]]
    want = [100 * (p / s - 1) for p, s in zip(pdd, same)]
    assert rows["throughput_change_best"]["simulated_values"] == pytest.approx(want)
    # the control has the baseline's prefill chips, and PDD's relay and MD
    ctl = m["control-pdd"]["split"]
    assert prefill_chips(ctl) == prefill_chips(m["best-same-dc-pd"]["split"])
    assert ctl["relay"] == m["best-pdd"]["split"]["relay"] and ctl["main"] == m["best-pdd"]["split"]["main"]
    # common loads: from light to 0.9 x the smaller mean capacity, the same loads on both sides
    cl = data["common_load"]
    smaller = min(sum(same) / len(same), sum(pdd) / len(pdd))
    assert cl["loads_rps"][-1] == pytest.approx(0.9 * smaller, rel=1e-3)
    assert max(cl["loads_rps"]) == cl["loads_rps"][-1] and cl["loads_rps"][0] < 0.5 * smaller
    pts = pd.DataFrame(cl["points"])
    for load, g in pts.groupby("load_rps"):
        assert set(g.deployment) == {"best-same-dc-pd", "best-pdd"} and len(g) == 4
        assert g.offered_rps.to_numpy() == pytest.approx(load, rel=0.01)  # offered as planned, on every seed
    assert "PDD's mean TTFT against same-DC PD's is" in rows["ttft_change_common_heavy"]["note"]
    # the regime load: 0.9 x the smallest capacity measured, stated in the row
    choice = data["operating_point"]["regime_choice"]
    assert choice["load_rps"] == pytest.approx(0.9 * min(min(v) for v in choice["capacities_rps"].values()), rel=1e-3)
    assert data["operating_point"]["regime_load_rps"] == pytest.approx(choice["load_rps"], rel=0.01)
    assert choice["text"] in rows["same_dc_ttft_p50"]["note"]
    # the load ladder: fractions of same-DC PD's smallest regime capacity, one rung per fraction that ran
    lad = data["operating_point"]["load_ladder"]
    plan = lad["plan"]
    same_caps = choice["capacities_rps"]["regime-same-dc-pd"]
    assert plan["capacity_rps"] == pytest.approx(min(same_caps), rel=1e-3)
    assert plan["loads_rps"] == pytest.approx([f * plan["capacity_rps"] for f in plan["fractions"]], rel=1e-3)
    assert lad["words"] in data["context"] and lad["words"] in rows["same_dc_ttft_p50_at_capacity"]["note"]
    if plan["capacity_rps"] > 0:
        assert [r["fraction"] for r in lad["rungs"]] == plan["fractions"]
        at_cap = [r for r in lad["rungs"] if r["fraction"] == 1.0][0]
        assert rows["same_dc_ttft_p50_at_capacity"]["simulated_values"] == pytest.approx(at_cap["same_dc_p50_s_per_seed"])
        assert (out / "figures" / "regime_ladder.png").is_file()


def test_full_map_is_the_shipped_sensitivity_sweep():
    import yaml

    from pddbench.reproduce.job import MAP_FULL, PDD_ONLY_AXES
    from pddbench.core.shipped import SCENARIOS

    pdd = yaml.safe_load((SCENARIOS / "sweeps" / "sensitivity-pdd.yaml").read_text())["axes"]
    same = yaml.safe_load((SCENARIOS / "sweeps" / "sensitivity-same-dc-pd.yaml").read_text())["axes"]
    assert pdd == MAP_FULL
    assert same == {k: v for k, v in MAP_FULL.items() if k not in PDD_ONLY_AXES}


def test_compare_deltas_against_a_chosen_baseline():
    from pddbench.measure.compare import with_deltas
    from pddbench.core.errors import UserError

    table = pd.DataFrame({"a": [100.0, 2.0], "b": [150.0, 2.0], "c": [50.0, 0.0]}, index=["TTFT p90 (ms)", "x"])
    d = with_deltas(table, "b")
    assert list(d.columns) == ["b", "a", "a vs b (%)", "c", "c vs b (%)"]
    assert d.loc["TTFT p90 (ms)", "a vs b (%)"] == pytest.approx(-33.3) and d.loc["x", "c vs b (%)"] == -100.0
    assert list(with_deltas(table, None).columns)[0] == "a"
    with pytest.raises(UserError):
        with_deltas(table, "nope")


def _rung(fraction, same_p50s, cross_p50s):
    runs = lambda p50s: [{"ttft_ms": {"p50": v * 1000, "p90": v * 2000, "p99": v * 3000}} for v in p50s]
    return runs(same_p50s), runs(cross_p50s)


def test_load_ladder_lines_rungs_and_words():
    """The ladder gives cross-DC PD enough lines for its top rung, finds the lightest stable rung
    where same-DC PD's median is seconds on every seed, and says so (or why not)."""
    from pddbench.reproduce import regime

    plan = regime.ladder_plan([{"throughput_within_sla_rps": 10.0}, {"throughput_within_sla_rps": 12.0}],
                              [5.0, None, 4.0], lines_now=1)
    assert plan["capacity_rps"] == 10.0 and plan["loads_rps"][-1] == pytest.approx(10.0 * regime.LADDER[-1])
    # top rung 12 req/s on lines of 4 req/s each at most 0.9 busy: ceil(12 / 3.6) = 4
    assert plan["wan_lines"] == 4
    assert regime.ladder_plan([{"throughput_within_sla_rps": 1.0}], [50.0], lines_now=2)["wan_lines"] == 2
    p50s = {0.5: ([0.2, 0.3], [0.3, 0.4]), 0.7: ([0.9, 1.4], [1.0, 2.0]), 0.9: ([1.2, 1.5], [1.5, 2.5]),
            1.0: ([2.0, 2.2], [3.0, 3.0]), 1.2: ([9.0, 9.0], [9.5, 9.5])}
    pairs = [_rung(f, *p50s[f]) for f in regime.LADDER]
    table = regime.ladder_table([a for a, _ in pairs], [b for _, b in pairs], plan)
    hit = regime.seconds_rung(table)
    assert hit["fraction"] == 0.9  # 0.7 reaches 1 s on one seed only
    assert hit["p50_inflation_s"] == pytest.approx([0.3, 1.0])
    words = regime.ladder_words(table, plan)
    assert "first reaches seconds at 0.9 x" in words and "0.9 (9.00 req/s): same-DC 1.35 / 2.70 / 4.05" in words
    # only past capacity: no stable rung, and the words say how far the median got
    low = [_rung(f, [0.1 * f, 0.1 * f], [0.2, 0.2]) if f <= 1 else _rung(f, [5.0, 5.0], [6.0, 6.0]) for f in regime.LADDER]
    table = regime.ladder_table([a for a, _ in low], [b for _, b in low], plan)
    assert regime.seconds_rung(table) is None
    assert "At no stable load" in regime.ladder_words(table, plan) and "0.10 s" in regime.ladder_words(table, plan)


def _browser_executable() -> str | None:
    """Debian's chromium (the real binary behind its wrapper script), else Playwright's own."""
    import shutil
    from pathlib import Path

    for path in ("/usr/lib/chromium/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if path and Path(path).is_file():
            return path
    return None


def test_report_html_works_in_a_real_browser(light_run):
    """report.html in headless Chromium at 1280x800: no console error, every image decoded, every
    in-page link lands on an element, and the answer block is visible without scrolling."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (make setup installs it)")
    exe = _browser_executable()
    if exe is None:
        pytest.skip("no Chromium on this host (make sysdeps installs Debian's chromium as root)")
    out, _ = light_run
    errors: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto((out / "report.html").resolve().as_uri(), wait_until="load")
            images = page.eval_on_selector_all("img", "els => els.map(e => [e.alt, e.complete, e.naturalWidth])")
            dangling = page.eval_on_selector_all(
                "a[href^='#']", "els => els.map(e => e.getAttribute('href').slice(1))"
                                ".filter(id => !document.getElementById(id))")
            links = page.eval_on_selector_all("a[href^='#']", "els => els.length")
            box = page.locator("#answer").bounding_box()
            visible = page.locator("#answer").is_visible()
            scroll_y = page.evaluate("window.scrollY")
        finally:
            browser.close()
    assert errors == []
    assert len(images) >= 6 and all(done and width > 0 for _, done, width in images), images
    prfaas = json.loads((out / "reproduce.json").read_text())["prfaas"]["rows"]
    assert links == len(CLAIMS) + len(prfaas) and dangling == []  # both ledgers' rows link to their details
    assert visible and scroll_y == 0 and box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 800, box


def _session_processes(sid: int) -> list[int]:
    """The pids whose session is `sid` (a zombie counts as gone)."""
    from pathlib import Path

    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(") ", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def test_ctrl_c_during_reproduce_ends_the_stage_beside_it_and_every_worker(tmp_path):
    """SIGINT to the whole process group, as a terminal's Ctrl-C, while both pools run (the
    simulations and the PrfaaS ledger beside them): exit 130, one line, no process left."""
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import REPO

    proc = subprocess.Popen([sys.executable, "-m", "pddbench", "reproduce", "--requests", "40", "-j", "2",
                             "--results", str(tmp_path / "results")], cwd=REPO, text=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    lines = []
    try:
        for line in proc.stderr:  # wait until both pools have work: a split search and the PrfaaS designs
            lines.append(line)
            text = "".join(lines)
            if "split search" in text and "prfaas:" in text:
                break
        assert proc.poll() is None, "".join(lines)
        time.sleep(1)
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=120)
        err = "".join(lines) + proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == 130 and "Traceback" not in err, (rc, err[-3000:])
    deadline = time.monotonic() + 30
    while _session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _session_processes(proc.pid) == []
    # the PrfaaS stage was stopped, not waited for: nothing of it kept, or what it kept says so
    designs = list((tmp_path / "results").glob("reproduce/*/prfaas/designs.json"))
    assert all(json.loads(d.read_text())["interrupted"] for d in designs), err[-3000:]
