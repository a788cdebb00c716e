"""The figures of `pddbench reproduce`, each readable without the code: its title says the
scenario, load and SLA; CDFs mark p50/p90/p99."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pddbench.core.io import save_figure
from pddbench.reproduce.ledger import Row
from pddbench.core.loading import read_json
from pddbench.metrics.records import read_records
from pddbench.report.plotting import pyplot

VERDICT_COLOR = {"reproduced": "tab:green", "same sign only": "tab:orange", "not reproduced": "tab:red",
                 "not measurable": "tab:grey", "inconclusive": "tab:purple"}


def _records(folder: Path) -> pd.DataFrame:
    r = read_records(folder / "records.parquet")
    return r[~r["failed"]]


def _summary(folder: Path) -> dict:
    return read_json(folder / "summary.json", "summary file")


def _load(s: dict) -> str:
    sla = s.get("sla") or {}
    return (f"{s.get('offered_rps') or 0:.1f} req/s, {s.get('requests_total', 0):,} requests, SLA P{sla.get('percentile', 90):g} "
            f"TTFT {sla.get('ttft_ms', 0) / 1000:g} s / TPOT {sla.get('tpot_ms', 0):g} ms")


def claims_dotplot(rows: list[Row], path: Path) -> Path:
    """Each claim on its own line: the article's value (or range) and the simulated mean with its
    spread over seeds, on a symmetric-log axis so % changes, seconds and KB share one figure."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 0.34 * len(rows) + 1.5))
    for i, r in enumerate(rows):
        a = r.claim.article
        y = len(rows) - 1 - i
        if isinstance(a, tuple):
            lo, hi = (max(a[0], -1e4), min(a[1], 1e4))
            ax.plot([lo, hi], [y, y], color="black", lw=4, alpha=0.3)
        elif a is not None:
            ax.plot(a, y, marker="D", mfc="none", color="black", ms=7)
        if r.mean is not None:
            lo, hi = r.spread
            ax.errorbar(r.mean, y, xerr=[[max(0.0, r.mean - lo)], [max(0.0, hi - r.mean)]], fmt="o", color=VERDICT_COLOR[r.verdict], capsize=3)
    ax.set_yticks(range(len(rows)), [f"{r.claim.figure[:60]} [{r.claim.unit}]" for r in reversed(rows)], fontsize="x-small")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("value in the claim's unit (symmetric log); black diamond / grey bar: article; dot: simulated mean, "
                  "bar: min..max over seeds", fontsize="small")
    ax.set_title("Article vs simulated (colour = verdict: green reproduced, orange same sign only, red not)")
    save_figure(fig, path)
    return path


def _cdf_with_marks(ax, values: np.ndarray, label: str, color, index: int = 0) -> None:
    """A CDF with p50/p90/p99 marked; the labels of the index-th series are staggered below."""
    x = np.sort(values)
    if not len(x):
        return
    ax.plot(x, np.arange(1, len(x) + 1) / len(x) * 100, label=label, color=color)
    for q, m in ((50, "o"), (90, "s"), (99, "^")):
        v = np.percentile(x, q)
        ax.plot(v, q, marker=m, color=color, ms=6)
        ax.annotate(f"p{q} {v:.2f}", (v, q), textcoords="offset points", xytext=(4, -10 - 9 * index),
                    fontsize="x-small", color=color)


def naive_cdf(folders: dict, op: dict, path: Path) -> Path:
    """Same-DC vs naive cross-DC TTFT at base and regime load, p50/p90/p99 marked."""
    plt = pyplot()
    fig, axs = plt.subplots(1, 2, figsize=(13, 4.8))
    colors = plt.get_cmap("tab10").colors
    for ax, (title, names) in zip(axs, (("base load", ("same-dc-pd", "cross-dc-pd", "pdd")),
                                        ("regime load", ("regime-same-dc-pd", "regime-cross-dc-pd", "regime-pdd")))):
        for i, (c, n) in enumerate(zip(colors, names)):
            _cdf_with_marks(ax, _records(folders[n])["ttft_ms"].to_numpy() / 1000, n, c, i)
        s = _summary(folders[names[0]])
        ax.axvline(s["sla"]["ttft_ms"] / 1000, color="grey", ls="--", lw=1, label="TTFT SLA")
        ax.set_xscale("log")
        ax.set_xlabel("TTFT (s, log scale)")
        ax.set_ylabel("requests at or below (%)")
        ax.set_title(f"{title}: {_load(s)}", fontsize="small")
        ax.legend(fontsize="x-small")
    fig.suptitle("TTFT CDF: same-DC PD vs naive cross-DC PD vs PDD (markers: p50 o, p90 s, p99 ^)")
    save_figure(fig, path)
    return path


def handoff_modes(folders: dict, load: str, path: Path) -> Path:
    """What differs between the handoff modes: MD's stall at takeover and how long each request
    held a relay decoder, as CDFs over the requests that went through the relay."""
    plt = pyplot()
    fig, axs = plt.subplots(1, 3, figsize=(16, 4.5))
    colors = plt.get_cmap("tab10").colors
    names = ("pdd-one-shot", "pdd-catch-up", "pdd")
    for i, (c, n) in enumerate(zip(colors, names)):
        r = _records(folders[n])
        label = "adaptive (pdd)" if n == "pdd" else n.removeprefix("pdd-")
        _cdf_with_marks(axs[0], r["handoff_stall_ms"].dropna().to_numpy(), label, c, i)
        relayed = r[r["relay_busy_ms"].fillna(0) > 0]  # requests that held a relay decoder at all
        _cdf_with_marks(axs[1], relayed["relay_busy_ms"].to_numpy() / 1000, label, c, i)
        if "relay_tokens" in r.columns and "output_tokens" in r.columns:
            share = relayed["relay_tokens"].sum() / max(1, relayed["output_tokens"].sum())
            axs[2].bar(label, share * 100, color=c)
    axs[0].set_xlabel("handoff stall: MD's first token - relay's last (ms)")
    axs[1].set_xlabel("relay occupancy per request (s)")
    axs[1].set_xscale("log")
    for ax in axs[:2]:
        ax.set_ylabel("relayed requests at or below (%)")
        ax.legend(fontsize="x-small")
    axs[2].set_ylabel("relay's share of the relayed requests' tokens (%)")
    fig.suptitle(f"Handoff modes (paper/pdd-one-shot, -catch-up, pdd adaptive; {load}); identical quantities left out")
    save_figure(fig, path)
    return path


def relay_only_drift(folders: dict, load: str, path: Path) -> Path:
    from pddbench.report.run_figures import hit_rates_over_time

    plt = pyplot()
    fig, axs = plt.subplots(1, 2, figsize=(13, 4.3), sharey=True)
    for ax, n in zip(axs, ("pdd", "pdd-relay-only-ablation")):
        h = hit_rates_over_time(read_records(folders[n] / "records.parquet"), window_s=30.0)
        ax.plot(h["minute"], h["prefill"] * 100, label="P (prefill side)")
        ax.plot(h["minute"], h["decode"] * 100, label="MD (decode side)")
        ax.set_title(n, fontsize="small")
        ax.set_xlabel("minute")
        ax.legend(fontsize="x-small")
    axs[0].set_ylabel("token-weighted prefix hit (%)")
    fig.suptitle(f"P->RLD-only ablation vs PDD: MD's hit rate against P's over time ({load})")
    save_figure(fig, path)
    return path


def bathtub(tub: pd.DataFrame, path: Path, sla: str = "") -> Path:
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.3))
    for col in tub.columns:
        a1.plot(tub.index * 100, tub[col], marker="o", label=col)
    for h in (20, 40):
        a1.axvline(h, color="grey", ls=":", lw=1)
        a2.axvline(h, color="grey", ls=":", lw=1)
    a1.set_xlabel("prefix hit rate (%)")
    a1.set_ylabel("throughput within SLA (req/s)")
    a1.legend(fontsize="small")
    if {"pdd", "same-dc-pd"} <= set(tub.columns):
        a2.plot(tub.index * 100, (tub["pdd"] / tub["same-dc-pd"] - 1) * 100, marker="o", color="tab:purple")
    a2.axhline(0, color="black", lw=0.8)
    a2.set_xlabel("prefix hit rate (%)")
    a2.set_ylabel("PDD vs same-DC PD (%)")
    fig.suptitle("Bathtub: paper/pdd and paper/same-dc-pd on a fixed workload (32K input, 256 output), throughput "
                 f"within SLA ({sla}) per hit rate;\ndotted: the article's 20% / 40% singular points", fontsize="medium")
    save_figure(fig, path)
    return path


def regime_ladder(table: list[dict], plan: dict, sla_text: str, path: Path) -> Path:
    """Same-DC vs naive cross-DC TTFT p50/p90/p99 against the load (fraction of same-DC PD's
    capacity): where the median reaches seconds, and what the WAN adds there."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 5))
    x = [r["fraction"] for r in table]
    for who, color, label in (("same_dc", "tab:blue", "same-DC PD"), ("cross_dc", "tab:orange", "naive cross-DC PD")):
        for p, style in (("p50", "-o"), ("p90", "--s"), ("p99", ":^")):
            ax.plot(x, [r[f"{who}_{p}_s"] for r in table], style, color=color, label=f"{label} {p}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.annotate("1 s: 'seconds'", (x[0] if x else 0, 1.0), textcoords="offset points", xytext=(2, 3), fontsize="x-small")
    ax.axvline(1.0, color="black", lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_xlabel(f"offered load / same-DC PD's regime capacity ({plan['capacity_rps']:.2f} req/s); right of the dashed "
                  "line: past capacity", fontsize="small")
    ax.set_ylabel("TTFT (s, mean over seeds)")
    ax.set_title(f"Naive cross-DC load ladder: regime scenarios, 1,500 requests, cross-DC on {plan['wan_lines']} WAN "
                 f"line(s), {sla_text}", fontsize="small")
    ax.legend(fontsize="x-small", ncol=2)
    save_figure(fig, path)
    return path
