"""Sweeps at scale (`pddbench sweep`): a sweep file names a base scenario, axes and what to
measure; every point's resolved scenario travels as JSON to a local process pool or a Ray cluster;
each finished point is kept as its own small file, so a sweep resumes and survives failures.

spec.py reads and validates the sweep file and resolves its points; payload.py is what a task
carries; tasks.py is what a worker runs; executors.py runs tasks (inline, process pool, Ray);
points.py keeps finished points and builds the table; report.py draws figures and summary.md;
run.py ties them together for the command."""
