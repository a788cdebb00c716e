"""The stated limits on sizes a user controls, and the one refusal they share.

Every size is checked arithmetically (counted, never built) before any work, allocation or
folder claim; past its limit the command refuses in one line with the size, a rough time
estimate and the option that raises the limit. The estimates use the figures below, measured on
the 2-core development host with the pure-Python simulator (the compiled one is ~2x faster):
they say "minutes or days", not an exact time."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Callable

from pddbench.core.errors import UserError

MAX_SWEEP_POINTS = 10_000        # points x repeats of one sweep file (`sweep --max-points`)
MAX_REPEATS = 100                # `run --repeat` (`run --max-repeats`)
MAX_OPTIMIZE_SPLITS = 500        # candidate splits of `optimize` (`optimize --max-splits`)
MAX_CROSSOVER_SEARCHES = 2_000  # capacity searches of `crossovers`, estimated (`crossovers --max-searches`)
MAX_OPTIMIZE_SIZES = 64          # distinct --sizes of `optimize` (chips per instance to try)
MAX_SYNTH_REQUESTS = 1_000_000   # `trace synth --requests` (`trace synth --max-requests`)
MAX_CAPACITY_ITERATIONS = 20     # k-section steps: 2**-20 of the bracket is below any useful resolution
MAX_PROBES_PER_ROUND = 64        # rates probed at once by `capacity --probes-per-round`
MAX_WORK_HOURS = 12.0            # estimated simulation on one core of `designs`, `crossovers`, `optimize`, `sweep`
                                 # (`--max-hours`): a count within its limit can still be days of work

# Rough costs, measured (Dec 2026, loaded 2-core host, pure-Python build):
SIM_S_PER_REQUEST = 3e-4         # simulating one request, summary included (paper/pdd, 1,000-10,000 requests)
RUN_FOLDER_S = 3.0               # one `run` folder besides its simulation: records, figures, process start
VALIDATE_S_PER_POINT = 3e-3      # resolving and validating one sweep point
SYNTH_S_PER_REQUEST = 1.6e-4     # `trace synth`: generating and writing one request
SYNTH_BYTES_PER_REQUEST = 410    # one JSONL line of a generated trace
BRACKET_PROBES = 4               # probes a capacity search typically spends bracketing (up to 9 each way)
DEFAULT_REQUESTS = 1_000         # the estimate's request count when the workload does not state one


def duration(seconds: float) -> str:
    """'~40 s', '~3.2 min', '~5.1 h', '~12 days', '~3e+09 years'."""
    for unit, size in (("years", 365 * 86400.0), ("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= 2 * size:
            return f"~{_figure(seconds / size)} {unit}"
    return f"~{seconds:.0f} s" if seconds >= 1 else "under a second"


def _figure(x: float) -> str:
    return f"{x:.2g}" if x >= 1e6 else f"{x:.1f}" if x < 10 else f"{x:,.0f}"


def count_text(n: int) -> str:
    """A size as a person reads it: 1,000,000,000; a very large one as 1.0e+30."""
    if n < 10 ** 15:
        return f"{n:,}"
    return f"{Decimal(n):.1e}"  # any size (float(n) overflows past 1.8e308)


def section_rounds(iterations: int, k: int) -> int:
    """Rounds of k-section that narrow the bracket at least as much as `iterations` bisections."""
    return iterations if k == 1 else math.ceil(iterations * math.log(2) / math.log(k + 1) - 1e-9)


def capacity_probes(iterations: int, per_round: int = 1) -> int:
    """Probes of one capacity search, typical: bracketing plus the k-section rounds."""
    return BRACKET_PROBES * per_round + section_rounds(iterations, per_round) * per_round


def warm_probes(iterations: int) -> int:
    """Probes of a warm-started capacity search, typical: near, a step or two away from it, and the
    bisection from that step (~1/16 of near) down to the cold search's final width (make run's
    crossovers: 973 probes for 125 searches at 7 iterations)."""
    return iterations + 1


def nominal_requests(workload: dict | None) -> int | None:
    """The request count a workload states (synth/fixed count, capped by max_requests), without
    generating or reading anything; None for a trace of unknown length."""
    workload = workload if isinstance(workload, dict) else {}
    source = workload.get("source") or next((s for s in ("trace", "fixed") if workload.get(s)), "synth")
    block = workload.get(source) if isinstance(workload.get(source), dict) else {}
    n = block.get("requests", 500 if source == "fixed" else DEFAULT_REQUESTS) if source != "trace" else None
    cap = workload.get("max_requests")
    if isinstance(cap, int) and not isinstance(cap, bool):
        n = cap if n is None else min(n, cap)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def size_refusal(what: str, n: int, limit: int, per_item_s: float | None, override: str | None,
                 work: str = "", unit: str = "") -> str | None:
    """The one-line refusal for size `n` past `limit`, or None within it: "{what} {n}{unit}, more
    than the limit of ...: ~T of work ({work} each); to run it anyway, {override}". `work` says
    what one item is (e.g. 'a capacity search of ~11 probes on ~1,000 requests')."""
    if n <= limit:
        return None
    estimate = ""
    if per_item_s is not None:
        try:
            total = n * per_item_s
        except OverflowError:  # a count past float's range (a product of huge axes)
            total = math.inf
        estimate = f": {duration(total)} of work" if math.isfinite(total) else ": more work than can ever finish"
        if work:
            estimate += f" ({work} each)"
    how = f"; to run it anyway, {override}" if override else "; this limit is fixed"
    return f"{what} {count_text(n)}{unit}, more than the limit of {limit:,}{estimate}{how}"


def check_size(what: str, n: int, limit: int, per_item_s: float | None, override: str | None,
               work: str = "", unit: str = "", error: Callable[[str], Exception] = UserError) -> None:
    """Raise `error(message)` (a UserError: one line, exit 2) when `n` is past `limit`."""
    msg = size_refusal(what, n, limit, per_item_s, override, work, unit)
    if msg is not None:
        raise error(msg)


def work_refusal(what: str, seconds: float, max_hours: float, how: str = "") -> str | None:
    """The one-line refusal for work estimated at `seconds` (one core) past `max_hours`, or None
    within it: "{what}: ~T of simulation on one core, more than the limit of H h; to run it
    anyway, give --max-hours N{how}"."""
    if not math.isnan(seconds) and seconds <= max_hours * 3600:
        return None
    need = seconds / 3600
    give = f"--max-hours {_hours(need)}" if math.isfinite(need) and need < 1e9 else "fewer or smaller items"
    return (f"{what}: {duration(seconds) if math.isfinite(seconds) else 'more than can ever finish'} of simulation "
            f"on one core, more than the limit of {max_hours:g} h; to run it anyway, give {give}{how}")


def _hours(h: float) -> str:
    return f"{math.ceil(h)}" if h >= 1 else f"{math.ceil(h * 100) / 100:g}"


def check_work(what: str, seconds: float, max_hours: float, how: str = "",
               error: Callable[[str], Exception] = UserError) -> None:
    """Raise `error(message)` (one line, exit 2) when the estimated work is past `max_hours`."""
    msg = work_refusal(what, seconds, max_hours, how)
    if msg is not None:
        raise error(msg)
