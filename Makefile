# Two commands: `make run` (set up + main job) and `make test` (set up + whole test suite).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup run test bench clean

# Re-installs only when pyproject.toml changes, so a second run is fast.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(BIN)/pddbench reproduce

test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python -m pytest -q benchmarks --benchmark-enable

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks
