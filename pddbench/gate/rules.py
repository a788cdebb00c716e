"""Gate rules: per metric, which way is worse and how much worse is tolerated.

A rules file (YAML):
    confidence: 0.95          # statistical mode: the bootstrap interval's coverage
    bootstrap: 2000           # resamples
    seed: 0
    rules:
      ttft_ms.p90: {worse: up, rel: 5%, abs: 20, live: {rel: 25%}, for: [run]}
      handoff_stall_ms.p90: {worse: up, rel: 10%, nullable: true}
      throughput_within_sla_rps: {worse: down, rel: 3%, for: [capacity]}
A change is tolerated while it goes the worse way by at most max(abs, rel * |baseline|) (either
tolerance suffices; a rule without either tolerates nothing). `live:` replaces rel/abs for live
(statistical) comparisons. Tolerances are finite and non-negative.

The gate fails closed: a ruled metric must be a finite number on both sides (a missing, non-finite
or non-numeric value is bad input, exit 2), and a rule whose metric neither input has is refused.
`for:` scopes a rule to the inputs that measure it (run: run, repeat and sweep folders; capacity:
capacity results and capacity sweeps; sweep: sweep folders), so one file can rule every kind of
input; a rule without `for:` applies to every input. `nullable: true`: the metric is null when the
run had no such event (no handoff, say); null on both sides is then n/a, null on one side a
regression (the rule cannot judge a value that appeared or vanished)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from pddbench.core.errors import UserError

DEFAULT_RULES = Path(__file__).resolve().parent / "default_rules.yaml"
KINDS = ("run", "capacity", "sweep")  # what `for:` may name (see GateInput.measures)
MAX_BOOTSTRAP = 100_000  # beyond this the resample arrays no longer fit in memory
MAX_REL = 100.0  # 10,000 % of the baseline: past it a tolerance passes any change (and rel * |baseline| overflows)
MAX_ABS = 1e18   # in the metric's unit: past any count of bytes, requests or milliseconds a run measures
MAX_SEED = 2 ** 63 - 1


@dataclass(frozen=True)
class Rule:
    metric: str
    worse: str            # "up" or "down"
    rel: float = 0.0      # fraction of |baseline|
    abs: float = 0.0      # in the metric's unit
    kinds: tuple[str, ...] = KINDS  # the inputs the rule applies to (`for:`)
    nullable: bool = False          # null on both sides is n/a, not bad input

    def tolerance(self, baseline: float) -> float:
        return max(self.abs, self.rel * abs(baseline))

    def describe(self) -> str:
        parts = [f"worse {self.worse}"]
        if self.rel:
            parts.append(f"rel {self.rel * 100:g}%")
        if self.abs:
            parts.append(f"abs {self.abs:g}")
        return ", ".join(parts)


@dataclass(frozen=True)
class RuleSet:
    rules: dict[str, Rule]
    live_rules: dict[str, Rule]
    confidence: float
    bootstrap: int
    seed: int
    source: str

    def for_mode(self, mode: str) -> dict[str, Rule]:
        return self.live_rules if mode == "statistical" else self.rules


def _finite(number, what: str, value, where: str) -> float:
    """A tolerance: finite, >= 0 and not absurd (NaN would compare false to everything and pass
    any change; inf, or 1e300, would tolerate anything)."""
    try:
        number = float(number)
    except OverflowError:
        number = math.inf
    hi = MAX_REL if what == "rel" else MAX_ABS
    if not math.isfinite(number) or not 0 <= number <= hi:
        raise UserError(f"{where}: {what} must be a finite number >= 0, not {value!r}; valid range: "
                        f"0 <= {what} <= {hi:g}" + (f" ({hi * 100:,.0f}%)" if what == "rel" else ""))
    return number


def _fraction(value, where: str) -> float:
    """5%, '5%', 0.05 -> 0.05."""
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            raise UserError(f"{where}: rel must be a fraction or a percentage like 5%, not {value!r}") from None
        return _finite(number, "rel", value, where)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _finite(value, "rel", value, where)
    raise UserError(f"{where}: rel must be a fraction or a percentage like 5%, not {value!r}")


def _number(value, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _finite(value, "abs", value, where)
    raise UserError(f"{where}: abs must be a number, not {value!r}")


def _kinds(value, where: str) -> tuple[str, ...]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or any(n not in KINDS for n in names):
        raise UserError(f"{where}: for: names the inputs a rule applies to, a list of {', '.join(KINDS)}; "
                        f"not {value!r}")
    return tuple(dict.fromkeys(names))


def _rule(metric: str, spec, where: str) -> tuple[Rule, Rule]:
    if not isinstance(spec, dict):
        raise UserError(f"{where}: a rule is a mapping like {{worse: up, rel: 5%, abs: 20}}, not {spec!r}")
    unknown = set(spec) - {"worse", "rel", "abs", "live", "for", "nullable"}
    if unknown:
        raise UserError(f"{where}: unknown key(s) {sorted(map(str, unknown))}; a rule has worse, rel, abs, live, "
                        "for, nullable")
    worse = spec.get("worse")
    if worse not in ("up", "down"):
        raise UserError(f"{where}: worse must be 'up' or 'down' (which way is a regression), not {worse!r}")
    rel = _fraction(spec.get("rel", 0), where)
    ab = _number(spec.get("abs", 0), where)
    kinds = _kinds(spec["for"], where) if "for" in spec else KINDS
    nullable = spec.get("nullable", False)
    if not isinstance(nullable, bool):
        raise UserError(f"{where}: nullable must be true or false, not {nullable!r}")
    base = Rule(metric, worse, rel, ab, kinds, nullable)
    live = spec.get("live")
    live = {} if live is None else live
    if not isinstance(live, dict) or set(live) - {"rel", "abs"}:
        raise UserError(f"{where}: live: takes rel and abs only")
    live_rule = Rule(metric, worse, _fraction(live.get("rel", rel), where + ".live"),
                     _number(live.get("abs", ab), where + ".live"), kinds, nullable)
    return base, live_rule


def parse_rules(data, source: str, text: str | None = None) -> RuleSet:
    """The rules in `data` (read from `source`; with its `text`, refusals name the line too)."""

    def at(*loc) -> str:
        from pddbench.schema.scenario import yaml_line

        line = yaml_line(text, loc)[0] if text is not None else None
        return f"{source}:{line}" if line else source

    if not isinstance(data, dict) or not isinstance(data.get("rules"), dict) or not data["rules"]:
        raise UserError(f"{source}: a rules file needs a non-empty 'rules:' mapping of metric -> rule")
    unknown = set(data) - {"rules", "confidence", "bootstrap", "seed"}
    if unknown:
        raise UserError(f"{source}: unknown top-level key(s) {sorted(map(str, unknown))}; allowed: rules, confidence, "
                        "bootstrap, seed")
    rules, live = {}, {}
    for metric, spec in data["rules"].items():
        if not isinstance(metric, str) or not metric.strip():
            raise UserError(f"{source}: rules: {metric!r} is not a metric name (a summary key such as ttft_ms.p90)")
        rules[metric], live[metric] = _rule(metric, spec, f"{at('rules', metric)}: rules.{metric}")
    conf = data.get("confidence", 0.95)
    if not isinstance(conf, (int, float)) or isinstance(conf, bool) or not 0.5 <= conf < 1:
        raise UserError(f"{at('confidence')}: confidence must be in [0.5, 1), not {conf!r}; valid range: "
                        "0.5 <= confidence < 1")
    boot = data.get("bootstrap", 2000)
    if not isinstance(boot, int) or isinstance(boot, bool) or not 100 <= boot <= MAX_BOOTSTRAP:
        raise UserError(f"{at('bootstrap')}: bootstrap must be an integer from 100 to {MAX_BOOTSTRAP:,}, not "
                        f"{boot!r}; valid range: 100 <= bootstrap <= {MAX_BOOTSTRAP:,}")
    seed = data.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        raise UserError(f"{at('seed')}: seed must be an integer >= 0, not {seed!r}; valid range: 0 <= seed <= "
                        f"{MAX_SEED:,}")
    return RuleSet(rules, live, float(conf), boot, seed, source)


def load_rules(path: Path | None = None) -> RuleSet:
    """The rules file, read strictly (duplicate keys refused: the last one would win silently)."""
    from pddbench.core.loading import load_yaml, read_text

    path = Path(path or DEFAULT_RULES)
    if not path.exists():
        raise UserError(f"{path}: rules file not found")
    text = read_text(path, "rules file")
    return parse_rules(load_yaml(text, str(path)), str(path), text)
