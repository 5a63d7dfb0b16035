# Two commands set up everything on a fresh machine:
#   make demo   - create .venv, install memolab with all extras, run the demo
#   make test   - the same set-up, then the whole test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.memolab-installed

.PHONY: demo test bench clean system-deps

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# the pinned CPU build of torch first: an unpinned torch pulls several GB
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,torch]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/run_demo.py

# The dashboard's browser tests drive Debian's headless Chromium.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
system-deps:
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }

test: $(STAMP) system-deps
	$(PY) -m pytest -q -p no:cacheprovider

# Every benchmark, peers side by side (adds HF `datasets` for the hashing table).
# For HitSave's column: benchmarks/hit_overhead.py --hitsave-python VENV/bin/python
bench: $(STAMP)
	$(PY) -m pip install -q -e '.[dev,torch,bench]'
	$(PY) benchmarks/hit_overhead.py
	$(PY) benchmarks/hashing.py
	$(PY) benchmarks/store_io.py
	$(PY) benchmarks/codegraph.py
	$(PY) benchmarks/scalar_logging.py
<<<<<<< HEAD
	$(PY) benchmarks/export_tb.py
=======
	$(PY) benchmarks/torch_first_hit.py
>>>>>>> main

clean:
	rm -rf $(VENV) build .memolab
