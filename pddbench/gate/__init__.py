"""`pddbench gate`: compare a candidate result with a baseline under per-metric rules.

rules.py (rules file), inputs.py (what a folder is: run, repeats, sweep, capacity), exact.py
(deterministic simulator: identical records pass, moved metrics judged by the rules),
statistical.py (live repeats: two-level bootstrap intervals of the difference), report.py
(markdown / JUnit / JSON), history.py (history table and figures), gate.py (the command)."""
