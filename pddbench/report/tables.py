"""Terminal tables (rich) for stats and summaries."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

console = Console()


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and x != x:
        return "-"
    if isinstance(x, float) and x.is_integer() and abs(x) >= 1:
        return f"{int(x):,}"
    if isinstance(x, float):
        return f"{x:,.3f}" if abs(x) < 10 else f"{x:,.1f}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def print_trace_stats(s: dict) -> None:
    t = Table(title=f"trace {s.get('trace', '')}", show_header=False)
    t.add_row("requests", _fmt(s["requests"]))
    t.add_row("sessions", _fmt(s["sessions"]))
    t.add_row("duration (s)", _fmt(s["duration_s"]))
    t.add_row("arrival rate (req/s)", _fmt(s["arrival_rate_rps"]))
    for key in ("input_length", "output_length"):
        d = s[key]
        t.add_row(f"{key} p50/p90/p99/max", " / ".join(_fmt(d[k]) for k in ("p50", "p90", "p99", "max")))
    t.add_row("cache", s["cache"])
    t.add_row("mean hit rate", f"{s['mean_hit_rate']:.3f}")
    t.add_row("token-weighted hit rate", f"{s['token_weighted_hit_rate']:.3f}")
    console.print(t)
    h = Table(title="hit-rate histogram")
    for label in s["hit_rate_histogram"]["labels"]:
        h.add_column(label, justify="right")
    h.add_row(*(f"{f * 100:.1f}%" for f in s["hit_rate_histogram"]["fraction"]))
    console.print(h)


def print_summary(s: dict) -> None:
    t = Table(title=f"{s.get('scenario', '')} ({s['deployment']}, {s.get('runtime', '')})", show_header=False)
    t.add_row("requests completed / failed", f"{s['requests_completed']:,} / {s['requests_failed']:,}")
    for key in ("ttft_ms", "tpot_ms"):
        d = s[key]
        t.add_row(f"{key} p50/p90/p99/mean", " / ".join(_fmt(d[k]) for k in ("p50", "p90", "p99", "mean")))
    t.add_row("SLA holds", str(s["sla_holds"]))
    t.add_row("SLO attainment", _fmt(s["slo_attainment"]))
    t.add_row("goodput (req/s)", _fmt(s["goodput_rps"]))
    t.add_row("WAN KV bytes", f"{s['wan_kv_bytes']:,}")
    t.add_row("relay token share", _fmt(s["relay_token_share"]))
    t.add_row("aborted transfers", _fmt(s["aborted_transfers"]))
    t.add_row("cost per hour", _fmt(s["cost_per_hour"]))
    if "sim_wall_s" in s:
        t.add_row("sim wall (s)", _fmt(s["sim_wall_s"]))
    console.print(t)


def print_comparison(table) -> None:
    t = Table(title="comparison")
    t.add_column("metric")
    for col in table.columns:
        t.add_column(str(col), justify="right")
    for metric, row in table.iterrows():
        t.add_row(str(metric), *(_fmt(v if not hasattr(v, "item") else v.item()) for v in row))
    console.print(t)
