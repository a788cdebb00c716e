"""The map's words against the crossovers (issue 39, point 5): which crossovers of the same claim
lie inside the sensitivity map's range of one of its axes, and the clause that says so, so that no
sentence generated from the map's probe points ("nowhere on the map") contradicts a sign change
that the crossover search (pddbench/reproduce/crossovers.py) found between them.

A map metric and a crossover claim are the same claim when METRIC_CLAIMS pairs them. A map axis
and a crossover axis are the same axis when:
- they have the same name and the map's values are numbers (TPOT SLA, KV bytes per token, output
  median, chip B's memory bandwidth, TTFT SLA);
- the map's axis is `network.wan` with shipped profile names, the crossover's is the line rate
  (`network.wan.rate_gbps`), and each of the map's profiles equals the crossover search's line
  (crossovers.Axis.overrides: the shipped line with another rate) in everything but its rate and
  name; the map value then stands for its rate. A profile that differs in anything else (delay,
  jitter, loss, stalls: e.g. lossy-wan) leaves the whole axis unmatched, as it is no point of the
  rate axis;
- the map's axis is the hit mix (`workload.synth.target_hist`: a histogram, or its name in
  reproduce's map table) and each histogram is a blend of the two shipped ones
  (crossovers.hit_mix_hist); the map value then stands for its share of the PDD-like mix.
Everything else is unmatched and never mentioned: the offered load, chip B's price and the model
axis are not map axes; a map axis with one value has no range.
"Inside the map's range" means the crossover's value lies between the smallest and the largest of
the map's values on that axis (ends included)."""

from __future__ import annotations

import math

import pandas as pd

# the map's metric -> the crossover claim that measures the same advantage
METRIC_CLAIMS = {"throughput_change_pct": "throughput_change_best", "ttft_change_pct": "ttft_change_common"}
WAN_AXIS, HIT_MIX_MAP_AXIS = "network.wan", "workload.synth.target_hist"
RATE_AXIS = "network.wan.rate_gbps"  # the crossover search's line-rate axis (crossovers.AXES)


def _number(v) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _wan_rate(name) -> float | None:
    """The rate of a map's line profile when it is the crossover search's line at that rate."""
    import yaml

    from netem.profile import LinkProfile, load_profile
    from pddbench.reproduce.crossovers import AXES

    try:
        profile = load_profile(str(name))
    except Exception:  # noqa: BLE001 (an inline or unknown profile: no point of the rate axis)
        return None
    if profile.rate_gbps is None:
        return None
    (text,) = AXES[RATE_AXIS].overrides(profile.rate_gbps)
    line = LinkProfile.model_validate(yaml.safe_load(text.split("=", 1)[1]))
    skip = {"name", "description"}
    return profile.rate_gbps if profile.model_dump(exclude=skip) == line.model_dump(exclude=skip) else None


def _hit_share(value) -> float | None:
    """The share of the PDD-like mix of a map's hit-rate histogram (or of its name)."""
    from pddbench.reproduce.crossovers import hit_mix_hist

    if isinstance(value, str):
        from pddbench.reproduce.tasks import HIT_MIX_NAMES

        value = next((list(h) for h, n in HIT_MIX_NAMES.items() if n == value), None)
    if not isinstance(value, (list, tuple)):
        return None
    zero, one = hit_mix_hist(0.0), hit_mix_hist(1.0)
    if len(value) != len(zero):
        return None
    shares = [(float(h) - m) / (p - m) for h, m, p in zip(value, zero, one) if p != m]
    if not shares:
        return None
    share = sum(shares) / len(shares)
    fits = all(abs(a - b) <= 1e-6 for a, b in zip(hit_mix_hist(share), value))
    return share if fits and -1e-9 <= share <= 1 + 1e-9 else None


def axis_points(axis: str, values) -> tuple[str, dict] | None:
    """The crossover axis a map axis stands for and each map value's number on it, or None
    where no honest match exists (see the module's docstring)."""
    from pddbench.reproduce.crossovers import AXES, HIT_MIX_AXIS

    if axis == WAN_AXIS:
        name, convert = RATE_AXIS, _wan_rate
    elif axis == HIT_MIX_MAP_AXIS:
        name, convert = HIT_MIX_AXIS, _hit_share
    elif axis in AXES:
        name, convert = axis, _number
    else:
        return None
    points = {}
    for v in values:
        x = convert(v)
        if x is None:
            return None
        points[v if not isinstance(v, list) else tuple(v)] = x
    return (name, points) if len(set(points.values())) > 1 else None


def _show(v, x: float, same: bool) -> str:
    return f"{x:g}" if same else f"{v} ({x:g})"


def inside(df: pd.DataFrame, axes: list[str], metric: str, items: list[dict] | None) -> list[dict]:
    """The crossovers of `metric`'s claim that lie inside the map's range of one of its axes:
    the item, the map axis, and where the value sits among the map's values."""
    claim = METRIC_CLAIMS.get(metric)
    if not items or claim is None or df.empty:
        return []
    out = []
    for axis in axes:
        if axis not in df.columns:
            continue
        values = list(dict.fromkeys(v if not isinstance(v, list) else tuple(v) for v in df[axis].dropna()))
        match = axis_points(axis, [list(v) if isinstance(v, tuple) else v for v in values])
        if match is None:
            continue
        name, points = match
        xs = sorted(points.values())
        for it in items:
            v = it.get("value")
            if it.get("claim") != claim or it.get("axis") != name or v is None or not xs[0] <= v <= xs[-1]:
                continue
            same = name == axis
            shown = sorted(((x, _show(k, x, same)) for k, x in points.items()))
            a, b = (it.get("bracket") or [v, v])[:2]
            within = [s for x, s in shown if min(a, b) <= x <= max(a, b)]
            lower = max((t for t in shown if t[0] <= v), default=shown[0])[1]
            upper = min((t for t in shown if t[0] >= v), default=shown[-1])[1]
            out.append({"item": it, "map_axis": axis, "lower": lower, "upper": upper, "within": within})
    return out


def clause(found: list[dict]) -> str:
    """Each crossover inside the map's range, in words: where its sign changes, on which side
    PDD wins, and between which of the map's values (or around which, when the bisection's
    bracket holds a map value)."""
    from pddbench.reproduce.crossovers import axis_label

    parts = []
    for f in found:
        it = f["item"]
        a, b = (it.get("bracket") or [it["value"], it["value"]])[:2]
        bracket = f"bracket {a:.3g} .. {b:.3g}, " if a != b else ""
        where = (f"{bracket}around the map's value{'s' if len(f['within']) > 1 else ''} {' and '.join(f['within'])}"
                 if f["within"] else f"{bracket}between the map's values {f['lower']} and {f['upper']}")
        parts.append(f"{axis_label(it['axis'])} = {it['value']:.3g}: {it['direction']} ({where})")
    return ("the crossover search (best split vs best split, every other assumption at its shipped value) finds "
            "the sign changing inside the map's range at " + "; ".join(parts))
