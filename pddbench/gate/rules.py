"""Gate rules: per metric, which way is worse and how much worse is tolerated.

A rules file (YAML):
    confidence: 0.95          # statistical mode: the bootstrap interval's coverage
    bootstrap: 2000           # resamples
    seed: 0
    rules:
      ttft_ms.p90: {worse: up, rel: 5%, abs: 20, live: {rel: 25%}}
      throughput_within_sla_rps: {worse: down, rel: 3%}
A change is tolerated while it goes the worse way by at most max(abs, rel * |baseline|) (either
tolerance suffices; a rule without either tolerates nothing). `live:` replaces rel/abs for live
(statistical) comparisons."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from pddbench.errors import UserError

DEFAULT_RULES = Path(__file__).resolve().parent / "default_rules.yaml"


@dataclass(frozen=True)
class Rule:
    metric: str
    worse: str            # "up" or "down"
    rel: float = 0.0      # fraction of |baseline|
    abs: float = 0.0      # in the metric's unit

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


def _fraction(value, where: str) -> float:
    """5%, '5%', 0.05 -> 0.05."""
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            raise UserError(f"{where}: rel must be a fraction or a percentage like 5%, not {value!r}") from None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise UserError(f"{where}: rel must be a fraction or a percentage like 5%, not {value!r}")


def _number(value, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise UserError(f"{where}: abs must be a number, not {value!r}")


def _rule(metric: str, spec, where: str) -> tuple[Rule, Rule]:
    if not isinstance(spec, dict):
        raise UserError(f"{where}: a rule is a mapping like {{worse: up, rel: 5%, abs: 20}}, not {spec!r}")
    unknown = set(spec) - {"worse", "rel", "abs", "live"}
    if unknown:
        raise UserError(f"{where}: unknown key(s) {sorted(unknown)}; a rule has worse, rel, abs, live")
    worse = spec.get("worse")
    if worse not in ("up", "down"):
        raise UserError(f"{where}: worse must be 'up' or 'down' (which way is a regression), not {worse!r}")
    rel = _fraction(spec.get("rel", 0), where)
    ab = _number(spec.get("abs", 0), where)
    if rel < 0 or ab < 0:
        raise UserError(f"{where}: tolerances cannot be negative")
    base = Rule(metric, worse, rel, ab)
    live = spec.get("live") or {}
    if not isinstance(live, dict) or set(live) - {"rel", "abs"}:
        raise UserError(f"{where}: live: takes rel and abs only")
    live_rule = Rule(metric, worse, _fraction(live.get("rel", rel), where + ".live"),
                     _number(live.get("abs", ab), where + ".live"))
    return base, live_rule


def parse_rules(data, source: str) -> RuleSet:
    if not isinstance(data, dict) or not isinstance(data.get("rules"), dict) or not data["rules"]:
        raise UserError(f"{source}: a rules file needs a non-empty 'rules:' mapping of metric -> rule")
    unknown = set(data) - {"rules", "confidence", "bootstrap", "seed"}
    if unknown:
        raise UserError(f"{source}: unknown top-level key(s) {sorted(unknown)}; allowed: rules, confidence, bootstrap, seed")
    rules, live = {}, {}
    for metric, spec in data["rules"].items():
        rules[str(metric)], live[str(metric)] = _rule(str(metric), spec, f"{source}: rules.{metric}")
    conf = data.get("confidence", 0.95)
    if not isinstance(conf, (int, float)) or not 0.5 <= conf < 1:
        raise UserError(f"{source}: confidence must be in [0.5, 1), not {conf!r}")
    boot = data.get("bootstrap", 2000)
    if not isinstance(boot, int) or boot < 100:
        raise UserError(f"{source}: bootstrap must be an integer >= 100, not {boot!r}")
    seed = data.get("seed", 0)
    if not isinstance(seed, int):
        raise UserError(f"{source}: seed must be an integer, not {seed!r}")
    return RuleSet(rules, live, float(conf), boot, seed, source)


def load_rules(path: Path | None = None) -> RuleSet:
    path = path or DEFAULT_RULES
    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: rules file not found") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise UserError(f"{path}{where}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    return parse_rules(data, str(path))
