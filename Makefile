# Two commands for a newcomer: `make run` and `make test`. Both bootstrap .venv first.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.12 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-installed

.PHONY: run test quicktest check venv upstreams migrate bench bench-quick bench-compare

venv: $(STAMP)

$(STAMP): requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else "Python 3.12 or newer is needed; found " + sys.version.split()[0])'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@touch $@

# The real MCP servers the gateway is tested against (tests/upstreamfixtures.py), pinned by the
# project's files: two virtualenvs, one on the official Python SDK 1.x and one on 2.x, and the
# npm packages (the TypeScript SDK's servers, ssh-mcp, Node 22 and the conformance suites).
# Stamped like the venv: a second run does nothing until a pin changes.
UPSTREAMS := var/upstreams
UPSTREAMS_NODE := tests/upstreams
UPSTREAMS_STAMPS := $(UPSTREAMS)/py1/.requirements-installed $(UPSTREAMS)/py2/.requirements-installed \
	$(UPSTREAMS_NODE)/node_modules/.installed

upstreams: $(UPSTREAMS_STAMPS)

$(UPSTREAMS)/%/.requirements-installed: $(UPSTREAMS_NODE)/requirements-%.txt
	@test -x $(UPSTREAMS)/$*/bin/python || $(PYTHON) -m venv $(UPSTREAMS)/$*
	$(UPSTREAMS)/$*/bin/python -m pip install --quiet --disable-pip-version-check -r $<
	@touch $@

# npm ci empties node_modules first, so the stamp inside it goes with an interrupted install.
$(UPSTREAMS_NODE)/node_modules/.installed: $(UPSTREAMS_NODE)/package-lock.json
	npm ci --prefix $(UPSTREAMS_NODE) --no-audit --no-fund
	@touch $@

migrate: $(STAMP)
	$(PY) manage.py migrate --noinput

run: migrate
	$(PY) manage.py runstack

# Lint, type-check, the import rules (pyproject.toml) and the documentation site, built strictly into
# var/site (mkdocs.yml: a broken link or anchor, or a page left out of the nav, fails it); the suite
# runs only on a clean tree. Not --quiet: it hides the warnings that --strict counts.
check: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	REWIND_VAR_DIR=$(CURDIR)/var/test $(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir $(CURDIR)/var/site

# Tests keep their own state folder, so they never touch the running demo's database or queue.
# They run on every core (pytest-xdist): each worker has its own test database, state folder
# and Redis database (tests/workerenv.py). TEST_WORKERS=0 runs them in this one process.
TEST_WORKERS ?= auto
test: check upstreams
	REWIND_VAR_DIR=$(CURDIR)/var/test $(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal --durations=25 $(PYTEST_ARGS)

# The everyday loop: no process of a test's own, no browser, no Node (tests/markers.py), and the
# quick share of the sweeps (tests/sizes.py: two simulator presets of twenty, fewer fuzz cases).
quicktest: $(STAMP)
	REWIND_TESTS_QUICK=1 REWIND_VAR_DIR=$(CURDIR)/var/test $(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal -m "not process and not browser and not node" $(PYTEST_ARGS)

# Every benchmark under bench/ and one table of their figures beside their targets (bench/run.py);
# the full size takes about an hour here, bench-quick a few minutes each. bench-compare holds the
# latest run against the one before and names what got worse by more than its measured spread.
bench: $(STAMP)
	$(PY) bench/run.py $(BENCH_ARGS)

bench-quick: $(STAMP)
	$(PY) bench/run.py --quick $(BENCH_ARGS)

bench-compare: $(STAMP)
	$(PY) bench/compare.py
