# Every target creates the virtual environment it needs; only Python 3.11+ and make are required.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
BASE   := $(VENV)/.installed-base

.PHONY: demo test check lint typecheck reliability bench package docs clean

$(PY):
	$(PYTHON) -m venv --without-pip $(VENV)

# The demo needs only the package's runtime dependencies (click, rich, orjson, msgspec, xxhash) and runs from src/:
# no pip in the venv, no build of the package; a few seconds on a fresh clone. The host's pip
# fills the venv (`pip --python`); without one, the venv gets its own pip first.
DEPS = $(shell $(PYTHON) -c "import shlex, tomllib; print(' '.join(map(shlex.quote, tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'])))")

$(BASE): pyproject.toml | $(PY)
	if $(PYTHON) -m pip --python $(PY) --version >/dev/null 2>&1; then \
		$(PYTHON) -m pip --python $(PY) install --quiet --disable-pip-version-check $(DEPS); \
	else \
		$(PY) -m ensurepip --default-pip >/dev/null && $(PY) -m pip install --quiet --disable-pip-version-check $(DEPS); \
	fi
	touch $(BASE)

# The package itself with the dev extras (test, lint and type-check tools, drivers, SDKs).
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip --version >/dev/null 2>&1 || $(PY) -m ensurepip --default-pip >/dev/null
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP) $(BASE)

demo: $(BASE)  ## the crash-and-resume demo: embedded SQLite, no API key, no network
	PYTHONPATH=src $(PY) -m unbroken.cli demo

# The default tier on two pytest-xdist workers (the machines have two cores); --dist loadfile keeps
# a test file on one worker. Every test has its own PostgreSQL schema, Redis key prefix, ports and
# temporary directory, so workers never share a run. `make test SERIAL=1` runs it in one process.
test: $(STAMP)  ## the default tier (not the slow sweeps), on two workers
	$(PY) -m pytest -q -m "not slow" $(if $(SERIAL),,-n 2 --dist loadfile)

lint: $(STAMP)  ## ruff, then the layering contracts ([tool.importlinter] in pyproject.toml)
	$(VENV)/bin/ruff check src tests benchmarks examples scripts
	$(VENV)/bin/ruff format --check src tests benchmarks examples scripts
	$(VENV)/bin/lint-imports

# Every test folder is checked with mypy --strict too (issue 13, item 4), one folder per run
# (each has its own conftest); a new test folder joins this list.
TYPED_TESTS := tests/unit tests/cli tests/faults_kit tests/features tests/reliability tests/integration/providers \
	tests/integration/postgres tests/integration/frameworks tests/faults tests/browser tests/golden \
	tests/integration/redis tests/integration/s3 tests/hostile tests/crash tests/contract tests/security tests/sim
# Helper modules that other tiers import after putting their folder on sys.path (pgtest, provider_server, s3test,
# redistest).
TEST_HELPERS := tests/integration/postgres:tests/integration/providers:tests/integration/s3:tests/integration/redis
# tests/integration's own files (its subfolders are listed above); they import core_scripts from tests/unit.
TYPED_INTEGRATION_FILES := $(wildcard tests/integration/*.py)

typecheck: $(STAMP)
	$(VENV)/bin/mypy
	MYPYPATH=tests $(VENV)/bin/mypy --strict scripts
	for dir in $(TYPED_TESTS); do MYPYPATH=$$dir:tests:$(TEST_HELPERS) $(VENV)/bin/mypy --strict $$dir || exit 1; done
	MYPYPATH=tests/unit:tests $(VENV)/bin/mypy --strict $(TYPED_INTEGRATION_FILES)

check: lint typecheck test  ## everything CI runs

reliability: $(STAMP)  ## long crash sweeps, random kills, fault loops, simulated schedules; then every slow test (minutes)
	$(PY) scripts/reliability.py
	$(PY) -m pytest -q -m slow

bench: $(STAMP)  ## benchmarks, printed as tables
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) benchmarks/run.py --readme README.md  # prints the tables and writes them into README.md

# What an index would get: the wheel and sdist, checked by twine, and the wheel installed into a
# fresh venv (no source tree on its path) running the demo. About 30 s (the build needs PyPI for
# its isolated build environment).
PKG_VENV := build/wheel-venv
package: $(STAMP)  ## build wheel + sdist, twine check, install the wheel in a fresh venv, run the demo from it
	rm -rf dist $(PKG_VENV)
	$(PY) -m build --outdir dist .
	$(VENV)/bin/twine check --strict dist/*
	if $(PYTHON) -m pip --version >/dev/null 2>&1; then \
		$(PYTHON) -m venv --without-pip $(PKG_VENV) && \
		$(PYTHON) -m pip --python $(PKG_VENV)/bin/python install --quiet --disable-pip-version-check dist/*.whl; \
	else \
		$(PYTHON) -m venv $(PKG_VENV) && $(PKG_VENV)/bin/pip install --quiet --disable-pip-version-check dist/*.whl; \
	fi
	cd $$(mktemp -d) && $(CURDIR)/$(PKG_VENV)/bin/python -c "import unbroken, sys; \
		assert 'site-packages' in unbroken.__file__, unbroken.__file__; print('installed', unbroken.__version__)" \
		&& $(CURDIR)/$(PKG_VENV)/bin/unbroken demo

# The docs as a site (mkdocs.yml over docs/, the API reference from docstrings): --strict fails
# on a broken link, a missing page or a docstring mkdocstrings cannot read. About 10 s.
docs: $(STAMP)  ## build the docs site into site/ (mkdocs build --strict)
	PYTHONPATH=src $(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache dist build site
