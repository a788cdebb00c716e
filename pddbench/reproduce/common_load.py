"""The common-load comparison (issue 14.3): the baseline and PDD, each at its best split, on the
same request stream at the same offered loads, from light load to 0.9 x the smaller of their
capacities (both are then below capacity, so every point is a stable operating point for both).

A capacity comparison says how much load each can carry; this says what a user sees at a load
both carry: TTFT (mean and p90), TPOT p90 and SLO attainment per load, and at which loads PDD's
TTFT is lower or higher. Loads are offered rates in req/s, identical on both sides and on every
seed (the rate scale is set per seed from its trace's own rate)."""

from __future__ import annotations

import pandas as pd

from pddbench.reproduce.claim_rows import change, row
from pddbench.reproduce.ledger import Row

LIGHT_FRACTIONS = (0.1, 0.3, 0.5, 0.7, 0.9)
FULL_FRACTIONS = tuple(round(0.1 * i, 1) for i in range(1, 10))
TOP = 0.9
METRICS = {"ttft_mean_ms": ("ttft_ms", "mean"), "ttft_p90_ms": ("ttft_ms", "p90"), "tpot_p90_ms": ("tpot_ms", "p90"),
           "slo_attainment": ("slo_attainment", None)}


def loads(caps: dict[str, list[dict]], fractions=LIGHT_FRACTIONS) -> dict:
    """The common loads: `fractions` (the last TOP) of the smaller mean capacity over seeds."""
    assert max(fractions) == TOP, "the sweep ends at 0.9 of the smaller capacity"
    mean = {n: sum(c["throughput_within_sla_rps"] for c in cs) / len(cs) for n, cs in caps.items()}
    smaller = min(mean, key=mean.get)
    return {"capacities_rps": {n: round(v, 4) for n, v in mean.items()}, "smaller": smaller,
            "fractions": list(fractions), "loads_rps": [round(f * mean[smaller], 4) for f in fractions]}


def _value(s: dict, key: str):
    a, b = METRICS[key]
    return s[a] if b is None else (s[a] or {}).get(b)


def table(summaries: dict[tuple[str, int, int], dict], info: dict) -> pd.DataFrame:
    """One row per (deployment, load, seed) from summaries keyed (deployment, load index, seed)."""
    rows = []
    for (dep, i, seed), s in sorted(summaries.items()):
        rows.append({"deployment": dep, "load_rps": info["loads_rps"][i], "fraction": info["fractions"][i],
                     "seed": seed, "offered_rps": s["offered_rps"], **{k: _value(s, k) for k in METRICS}})
    return pd.DataFrame(rows)


def changes(tab: pd.DataFrame, base: str, other: str, key: str) -> pd.DataFrame:
    """Per load and seed: `other`'s `key` against `base`'s, in %."""
    b = tab[tab.deployment == base].set_index(["load_rps", "seed"])[key]
    o = tab[tab.deployment == other].set_index(["load_rps", "seed"])[key]
    both = pd.DataFrame({"base": b, "other": o}).dropna()
    both["change_pct"] = [change(x, y) for x, y in zip(both["other"], both["base"])]
    return both.reset_index()


def words(tab: pd.DataFrame, base: str, other: str, names: tuple[str, str] = ("same-DC PD", "PDD")) -> str:
    """At which loads PDD's TTFT (mean and p90) is lower or higher, and TPOT and SLO attainment."""
    out = []
    for key, what in (("ttft_mean_ms", "mean TTFT"), ("ttft_p90_ms", "P90 TTFT"), ("tpot_p90_ms", "P90 TPOT")):
        ch = changes(tab, base, other, key).groupby("load_rps")["change_pct"].mean()
        lower = [f"{x:g} ({v:+.1f} %)" for x, v in ch.items() if v < 0]
        higher = [f"{x:g} ({v:+.1f} %)" for x, v in ch.items() if v >= 0]
        text = f"{names[1]}'s {what} against {names[0]}'s is "
        text += "; ".join(p for p in (f"lower at {', '.join(lower)} req/s" if lower else "",
                                      f"higher (or equal) at {', '.join(higher)} req/s" if higher else "") if p)
        out.append(text)
    slo = tab.groupby(["deployment", "load_rps"])["slo_attainment"].mean()
    att = [f"{x:g}: {slo[(base, x)] * 100:.0f} vs {slo[(other, x)] * 100:.0f} %" for x in sorted(set(tab.load_rps))
           if (base, x) in slo and (other, x) in slo]
    out.append(f"SLO attainment ({names[0]} vs {names[1]}) by load in req/s: " + "; ".join(att))
    return ". ".join(out) + "."


def measure_rows(tab: pd.DataFrame, info: dict, base: str, other: str, light: bool) -> list[Row]:
    """The TTFT change at the lightest and at the heaviest (0.9 x) common load, one value per seed;
    the words for every load go with both rows."""
    ch = changes(tab, base, other, "ttft_mean_ms")
    lo, hi = min(info["loads_rps"]), max(info["loads_rps"])
    caps = ", ".join(f"{n} {v:g}" for n, v in info["capacities_rps"].items())
    note = (f"Loads {', '.join(f'{x:g}' for x in info['loads_rps'])} req/s = {', '.join(f'{f:g}' for f in info['fractions'])}"
            f" x the smaller capacity ({info['smaller']}; capacities {caps} req/s, mean over seeds). "
            + words(tab, base, other)
            + (" Light run: " + f"{len(info['loads_rps'])} loads on the light trace." if light else ""))
    at = lambda x: ch[ch.load_rps == x].sort_values("seed")["change_pct"].tolist()
    return [row("ttft_change_common_light", at(lo), note), row("ttft_change_common_heavy", at(hi), note)]
