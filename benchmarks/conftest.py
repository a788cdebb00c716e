"""Every benchmark is timed beside the yardstick (pddbench/gate/yardstick.py): the fastest of the
reference loop's timings right before and right after it, kept in its extra_info, so the nightly
gates the benchmark's time relative to the host's speed at that moment."""

import pytest

from pddbench.gate.yardstick import EXTRA_KEY, yardstick_min_s


@pytest.fixture(autouse=True)
def _yardstick(request):
    if "benchmark" not in request.fixturenames:
        yield
        return
    bench = request.getfixturevalue("benchmark")
    if bench.disabled:  # --benchmark-disable: run once as a test, nothing timed
        yield
        return
    before = yardstick_min_s()
    yield
    bench.extra_info[EXTRA_KEY] = min(before, yardstick_min_s())
