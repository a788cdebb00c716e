"""Terminal tables (rich) for stats and summaries."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

console = Console()


def _fmt(x) -> str:
    if x is None:
        return "-"
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
