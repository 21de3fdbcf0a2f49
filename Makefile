# Every target creates the virtual environment it needs; only Python 3.11+ and make are required.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test check lint typecheck reliability bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)  ## the crash-and-resume demo: embedded SQLite, no API key, no network
	$(VENV)/bin/unbroken demo

test: $(STAMP)  ## the whole test suite
	$(PY) -m pytest -q -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/ruff format --check src tests benchmarks examples

typecheck: $(STAMP)
	$(VENV)/bin/mypy

check: lint typecheck test  ## everything CI runs

reliability: $(STAMP)  ## long crash sweeps, random kills, fault loops; then every slow test (minutes)
	$(PY) -m unbroken.reliability
	$(PY) -m pytest -q -m slow

bench: $(STAMP)  ## benchmarks, printed as tables
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
