"""Link profile: one description of a network path, read by the simulator's links and by the
live emulation backends alike. Times in ms, rates in Gbit/s, probabilities as fractions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from netem.errors import InputError
from netem.strict_yaml import StrictLoader

PROFILE_DIR = Path(__file__).parent / "profiles"
# Bounds that keep every time and rate in the range floats resolve (a run's milliseconds add
# without rounding away): past them a profile is refused with the range, not simulated forever.
MAX_MS = 1e7  # a delay, stall or replayed latency: ~2.8 h
Ms = Annotated[float, Field(ge=0, le=MAX_MS)]
Offset = Annotated[float, Field(ge=-MAX_MS, le=MAX_MS)]
MIN_GBPS, MAX_GBPS = 1e-6, 1e6  # 1 kbit/s .. 1 Pbit/s


class Jitter(BaseModel):
    model_config = {"extra": "forbid", "allow_inf_nan": False}
    distribution: Literal["none", "normal", "uniform", "pareto", "lognormal", "empirical"] = "none"
    sd_ms: float = Field(0.0, ge=0, le=MAX_MS, description="spread: sd (normal/lognormal), half-width (uniform), scale (pareto)")
    pareto_shape: float = Field(2.5, gt=1, le=1000)
    samples_ms: list[Offset] = Field(default_factory=list, description="offsets for 'empirical'")
    reorder: bool = Field(False, description="packets may overtake (netem semantics); off = FIFO release")


class Loss(BaseModel):
    model_config = {"extra": "forbid", "allow_inf_nan": False}
    model: Literal["none", "bernoulli", "gilbert_elliott"] = "none"
    p: float = Field(0.0, ge=0, le=1, description="bernoulli loss, or GE good->bad transition")
    r: float = Field(1.0, ge=0, le=1, description="GE bad->good transition")
    loss_good: float = Field(0.0, ge=0, le=1)
    loss_bad: float = Field(1.0, ge=0, le=1)


class Outages(BaseModel):
    """Link stalls: packets (or transfers) held for a heavy-tailed time."""
    model_config = {"extra": "forbid", "allow_inf_nan": False}
    rate_per_s: float = Field(0.0, ge=0, le=100, description="mean stall starts per second (Poisson)")
    min_ms: float = Field(1000.0, ge=0, le=MAX_MS, description="pareto scale: the shortest stall")
    pareto_shape: float = Field(1.5, ge=0.01, le=1000)
    max_ms: float = Field(20000.0, ge=0, le=MAX_MS)
    windows_ms: list[tuple[Ms, Ms]] = Field(
        default_factory=list, description="scripted outages [start, end) in ms from link start; replace the random ones")


class Direction(BaseModel):
    """What may differ per direction; unset fields take the profile's values."""
    model_config = {"extra": "forbid", "allow_inf_nan": False}
    delay_ms: float | None = Field(None, ge=0, le=MAX_MS)
    jitter: Jitter | None = None
    rate_gbps: float | None = Field(None, ge=MIN_GBPS, le=MAX_GBPS)
    loss: Loss | None = None


class LinkProfile(BaseModel):
    model_config = {"extra": "forbid", "allow_inf_nan": False}
    name: str = "link"
    description: str = ""
    delay_ms: float = Field(0.0, ge=0, le=MAX_MS, description="one-way base delay")
    jitter: Jitter = Field(default_factory=Jitter)
    loss: Loss = Field(default_factory=Loss)
    rate_gbps: float | None = Field(None, ge=MIN_GBPS, le=MAX_GBPS, description="bottleneck rate; None = unlimited")
    queue_limit_packets: int = Field(10000, ge=1, le=1_000_000_000)
    outages: Outages = Field(default_factory=Outages)
    sharing: Literal["fair", "fifo"] = Field(
        "fair", description="simulator only: how concurrent transfers share the rate; fair = equally, as parallel "
                            "TCP flows; fifo = one at a time in order, as NIXL over UCX TCP (one connection) does")
    transfer_latency_ms: list[Ms] = Field(
        default_factory=list,
        description="replayed per-transfer latencies (cycled); when set, a transfer takes exactly these")
    forward: Direction = Field(default_factory=Direction, description="dc-a -> dc-b overrides")
    reverse: Direction = Field(default_factory=Direction, description="dc-b -> dc-a overrides")
    rate_scale: float = Field(1.0, ge=1e-6, le=1e6, description="k: emulated rate = rate_gbps / k (recorded)")
    lateness_tolerance_ms: float = Field(5.0, ge=0, le=MAX_MS, description="emulator lateness p99 above this marks a run invalid")
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> "LinkProfile":
        if self.jitter.distribution == "empirical" and not self.jitter.samples_ms:
            raise ValueError("jitter.distribution 'empirical' needs jitter.samples_ms")
        return self


def load_profile(ref: str | Path) -> LinkProfile:
    """A profile by shipped name (e.g. 'fixed-30ms') or by YAML path."""
    path = Path(ref)
    if not path.suffix:
        path = PROFILE_DIR / f"{ref}.yaml"
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in PROFILE_DIR.glob("*.yaml")))
        raise InputError(str(ref), f"no such link profile (shipped: {names})")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=StrictLoader)  # noqa: S506 (a SafeLoader)
        if not isinstance(data, dict) or not data:
            what = "is empty" if data is None or data == {} else f"holds a {type(data).__name__}"
            raise InputError(str(path), f"{what}: a link profile is a YAML mapping of its settings "
                             f"(see the shipped ones in {PROFILE_DIR})")
        data.setdefault("name", path.stem)
        return LinkProfile.model_validate(data)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(str(path), f"is not valid YAML ({getattr(exc, 'problem', None) or exc})",
                         line=mark.line + 1 if mark else None) from None
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(str(path), err["msg"], field=".".join(map(str, err["loc"]))) from None
