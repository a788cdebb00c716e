"""What the reproduction's verdicts rest on: the model, the latency model and how far that latency
model is from real GPU measurements (pddbench/measure/roofline_check.py), in one line of the
answer and one object of reproduce.json."""

from __future__ import annotations

from pddbench.measure.roofline_check import MEASURED_CHIPS, check
from pddbench.schema.scenario import Scenario


def basis(sc: Scenario) -> dict:
    m, lat = sc.model, sc.latency
    assert m is not None
    out: dict = {"model": {"name": m.name, "given_by": "architecture" if m.arch else "sizes",
                           "params_total_b": m.params_total_b, "params_active_b": m.params_active_b,
                           "kv_bytes_per_token": m.kv_bytes_per_token},
                 "latency": lat.model_dump(exclude_none=True)}
    if lat.kind == "roofline" and lat.measured_chip:
        got = check(lat, (lat.measured_chip,))[lat.measured_chip]  # only the chip it rests on
        out["roofline_check"] = {"chip": lat.measured_chip, "source": MEASURED_CHIPS[lat.measured_chip].source,
                                 "at_these_settings": got["shipped_settings"], "fitted_held_out": got["fitted_held_out"],
                                 "fit": got["fit"], "attention_checked": False}
    return out


def basis_line(b: dict) -> str:
    m, lat = b["model"], b["latency"]
    text = (f"- What the verdicts rest on: model {m['name']} (by its {m['given_by']}: {m['params_total_b']:g}B total, "
            f"{m['params_active_b']:g}B active, {m['kv_bytes_per_token']:,} B KV/token); latency: ")
    if lat["kind"] != "roofline":
        return text + f"{lat['kind']} (fitted to measured steps)."
    text += (f"the roofline (compute efficiency {lat['compute_efficiency']:g}, memory {lat['memory_efficiency']:g}, "
             f"{lat.get('layer_overhead_us', 0):g} us a layer, {lat.get('allreduce_latency_us', 0):g} us an all-reduce)")
    rc = b.get("roofline_check")
    if not rc:
        return text + ", not checked against a measured chip."
    at, held = rc["at_these_settings"], rc["fitted_held_out"]
    return (text + f": fitted to public {rc['chip'].upper()} step measurements of dense models' linear layers, "
            f"{100 * held['median_abs_error']:.1f} % median error on held-out models (p90 "
            f"{100 * held['p90_abs_error']:.0f} %), {100 * at['median_abs_error']:.1f} % at these settings over all "
            f"{at['steps']} steps; not checked: attention, MoE, fp8, and chips A and B themselves (their peak and "
            "bandwidth are assumptions).")
