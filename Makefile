# Two commands set up everything on a fresh machine:
#   make demo   - create .venv, install memolab and torch (what the demo needs, no more), run the demo
#   make test   - the same set-up, the static checks (make lint), then the whole test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.memolab-installed
DEMO_STAMP := $(VENV)/.memolab-demo-installed

.PHONY: demo ui screenshots lint test test-stress bench readme-table clean system-deps selftest

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# the pinned CPU build of torch first: an unpinned torch pulls several GB
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,torch]'
	touch $(STAMP) $(DEMO_STAMP)

# The demo needs memolab and torch, not the dev extra (pytest, mypy, ray, dask, transformers,
# lightning, moto: minutes more): installed with pip's own progress, once.
$(DEMO_STAMP): pyproject.toml Makefile
	@echo "== first set-up, once: $(VENV) with memolab and the CPU build of PyTorch"
	@echo "== (PyTorch is the big download: a few minutes the first time; later runs start at once)"
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e '.[torch]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(PY) examples/run_demo.py

# the dashboard on the demo's store (after `make demo`)
ui: $(STAMP)
	cd build/demo && $(CURDIR)/$(VENV)/bin/memolab ui

# the README's screenshots, from the demo's own store and a sweep's (runs both; needs Debian's chromium)
screenshots: $(STAMP) system-deps
	$(PY) examples/screenshots.py

# The dashboard's browser tests drive Debian's headless Chromium; the team store's
# tests start a PostgreSQL server of their own (initdb + pg_ctl from Debian's package);
# the command line's terminal tests run it in tmux at 80 columns (tests/test_cli_terminal.py).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
system-deps:
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql >/dev/null; }
	@command -v tmux >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq tmux >/dev/null; }

# The self-tests of every mechanism that reads interpreter or torch internals (dict version tags
# at fixed offsets, copy-on-write storages, threading._register_atexit, torch's seed queue), in a
# fresh process: a new CPython or torch release is checked with this one command (each also runs
# at first use, falling back to the safe way where it fails; docs/architecture.md).
selftest: $(STAMP)
	$(PY) -m memolab.cli.selftest

# The static checks, configured in pyproject.toml (both pinned in its dev extra): ruff (pycodestyle,
# pyflakes, bugbear, imports, pyupgrade) on everything Python here, mypy (strict) on src/memolab.
LINT_PATHS := src tests benchmarks stress examples
lint: $(STAMP)
	$(PY) -m ruff check $(LINT_PATHS)
	$(PY) -m mypy

# Three workers, each taking whole test files (--dist loadfile: a file's servers and fixtures
# stay in one process), the slowest files first (tests/durations.json, read by tests/conftest.py;
# --no-loadscope-reorder keeps that order). CI's machines have 2 cores: two workers left a fifth
# of them idle (tests waiting on their child processes, servers and disks) and took 9.4 min on a
# quiet 2-core machine (10.0 on CI); three take 8.5 to 9.0 there. The 15 slowest tests are printed.
# The static checks are make lint's: ruff first (half a second), then mypy BESIDE the tests, at
# nice 10: its minute of one core (no cache on a fresh machine) fills the cores the tests leave
# idle while they wait on servers and child processes, instead of adding a minute before them.
# Either failing fails the target; mypy's report is printed after the tests'.
test: $(STAMP) system-deps
	$(PY) -m ruff check $(LINT_PATHS)
	@log=$$(mktemp); nice -n 10 $(PY) -m mypy >$$log 2>&1 & mypy=$$!; \
	trap 'kill $$mypy 2>/dev/null; rm -f $$log' EXIT; trap 'exit 130' INT TERM; \
	echo "$(PY) -m mypy  (beside the tests, at nice 10)"; \
	$(PY) -m pytest -q -p no:cacheprovider -n 3 --dist loadfile --no-loadscope-reorder --durations=15; \
	tests=$$?; wait $$mypy; lint=$$?; echo "== mypy (exit $$lint):"; cat $$log; \
	[ $$tests -eq 0 ] && [ $$lint -eq 0 ]

# The suite 3 times while spinning processes keep every core busy, and a census of what failed
# in each run (stress/suite_under_load.py): a test that passes only on an idle machine is flaky.
test-stress: $(STAMP) system-deps
	$(PY) stress/suite_under_load.py --runs 3

# Every benchmark script in benchmarks/ (each `benchmarks/*.py` not starting with
# `_`, so a script added there is run without editing this file), peers side by
# side (adds HF `datasets` for the hashing table). One failing script does not
# stop the others; the target fails at the end if any did. Each runs through
# benchmarks/record.py, which keeps its tables in benchmarks/results/<script>.json;
# then the README's performance table is written from those files (readme-table).
#   make bench BENCH_SKIP="store_io.py hashing.py"   skips scripts by file name
# For HitSave's column: benchmarks/hit_overhead.py --hitsave-python VENV/bin/python
BENCH_SKIP ?=
# store_scaling.py is recorded in its --reads mode: issue 52 §1's table, which the README and
# docs/performance.md quote (its default mode, hits and misses against joblib, runs by hand)
SCALING_ARGS ?= --reads --sizes 1000,100000,1000000 --rounds 3 --hits 1000 --misses 300 --doctor-max 1000000
bench: $(STAMP) system-deps
	$(PY) -m pip install -q -e '.[dev,torch,bench]'
	@failed=""; for f in benchmarks/[!_]*.py; do \
	  case "$${f##*/}" in record.py|readme_table.py) continue;; esac; \
	  case " $(BENCH_SKIP) " in *" $${f##*/} "*) echo "== $$f: skipped (BENCH_SKIP)"; continue;; esac; \
	  args=""; case "$${f##*/}" in store_scaling.py) args="$(SCALING_ARGS)";; esac; \
	  echo "== $$f $$args"; $(PY) benchmarks/record.py "$${f##*/}" $$args || failed="$$failed $${f##*/}"; \
	done; \
	$(PY) benchmarks/readme_table.py --write; \
	if [ -n "$$failed" ]; then echo "benchmarks that failed:$$failed"; exit 1; fi

# The README's performance table, from benchmarks/results/*.json (tests/test_readme_table.py
# fails when they differ)
readme-table:
	$(PY) benchmarks/readme_table.py --write

clean:
	rm -rf $(VENV) build .memolab
