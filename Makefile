# Two commands: `make run` (set up + main job) and `make test` (set up + whole test suite).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup sysdeps run test bench clean

# Re-installs only when pyproject.toml changes, so a second run is fast.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -e ".[dev]"
	touch $(STAMP)

# System tools the live network tests need (root only; skipped with a reason otherwise).
sysdeps:
	@if [ "$$(id -u)" = 0 ] && ! command -v iptables >/dev/null; then \
		echo "installing iptables (NFQUEUE rules of the netem delay line)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iptables >/dev/null; \
	fi

setup: $(STAMP) sysdeps

run: setup
	$(BIN)/pddbench reproduce

test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python -m pytest -q benchmarks --benchmark-enable

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks
