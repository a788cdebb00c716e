"""The suite's lanes (tests/lane.py, tests/conftest.py started_here): a lane counts as its own
every process it started, also one whose parent died, and never another lane's; an orphan that
exits is reaped, so no zombie of it is left for `pgrep` to match."""

import subprocess
import sys

from tests.conftest import REPO

# Inside a lane: start a process that orphans itself (its parent exits at once), then report
# which of it and an outside process (argv[1]) started_here keeps; then let the orphan exit and
# report whether any zombie is left under the lane's root.
INSIDE = """
import os, subprocess, sys, time
sys.path.insert(0, {repo!r})
from tests.conftest import started_here
outside = int(sys.argv[1])
if os.fork() == 0:  # the middle process: forks the orphan and exits
    if os.fork() == 0:
        time.sleep(1.5)
        os._exit(0)
    os._exit(0)
os.wait()
root = int(os.environ["PDDBENCH_TEST_LANE_ROOT"])
kids = [int(p) for p in subprocess.run(["pgrep", "-P", str(root)], capture_output=True, text=True).stdout.split()]
orphans = [p for p in kids if p != os.getpid()]
print("orphans", len(orphans), "kept", len(started_here(orphans)), "outside kept", len(started_here([outside])))
time.sleep(3)
stats = [open(f"/proc/{{p}}/stat").read().rsplit(")", 1)[1].split()[0]
         for p in subprocess.run(["pgrep", "-P", str(root)], capture_output=True, text=True).stdout.split()
         if int(p) != os.getpid()]
print("left under the root", stats)
"""


def test_a_lane_keeps_its_orphans_and_reaps_them_and_ignores_other_processes():
    outside = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        res = subprocess.run([sys.executable, str(REPO / "tests" / "lane.py"), sys.executable, "-c",
                              INSIDE.format(repo=str(REPO)), str(outside.pid)],
                             capture_output=True, text=True, timeout=60)
    finally:
        outside.kill()
        outside.wait()
    assert res.returncode == 0, res.stderr
    assert "orphans 1 kept 1 outside kept 0" in res.stdout, res.stdout
    assert "left under the root []" in res.stdout, res.stdout  # the orphan exited and was reaped


def test_a_lane_exits_with_its_commands_status():
    lane = [sys.executable, str(REPO / "tests" / "lane.py")]
    assert subprocess.run([*lane, sys.executable, "-c", "raise SystemExit(3)"], timeout=60).returncode == 3
    assert subprocess.run([*lane, sys.executable, "-c", "pass"], timeout=60).returncode == 0


def test_outside_a_lane_every_process_counts(monkeypatch):
    from tests.conftest import started_here

    monkeypatch.delenv("PDDBENCH_TEST_LANE_ROOT", raising=False)
    assert started_here([1, 12345]) == [1, 12345]
    monkeypatch.setenv("PDDBENCH_TEST_LANE_ROOT", str(999_999_999))  # a root nothing descends from
    assert started_here([1, "1 init"]) == []
