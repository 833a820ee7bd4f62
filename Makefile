# Brook: the README's commands. Works from a fresh clone: the first target that needs Python
# creates .venv and installs the project (editable, with the platform and dev extras: everything); it
# reinstalls only when pyproject.toml changes.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
STAMP := $(VENV)/.installed
DAGSTER_HOME ?= $(CURDIR)/.dagster
UI_PORT ?= 3000
# --durations: the 30 slowest tests end every run's report (the suite's wall time is watched: README).
PYTEST_ARGS ?= --durations=30
# pytest-xdist workers for `make test` (tests/conftest.py: what each worker gets, which tests share one);
# PYTEST_WORKERS=0 runs the suite in this process, one test after the other.
PYTEST_WORKERS ?= 2

.PHONY: .venv demo test bench bench-more ui clean

.venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --upgrade pip
	$(VENV)/bin/python -m pip install -e '.[dev,platform]'
	@touch $(STAMP)

demo: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	DAGSTER_HOME=$(DAGSTER_HOME) $(VENV)/bin/python -m apps.demo

test: $(STAMP)
	$(VENV)/bin/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# Issue 21's workloads, Brook beside the minimal hand-written loop in each run (bench/README.md), in sequence;
# each runs even if an earlier one fails; then one table of every ratio; exit code = the worst one.
# BENCH_ARGS is passed to each (e.g. BENCH_ARGS="--records 100000"). `make bench-more`: the other benchmarks.
BENCH_ARGS ?=
bench: $(STAMP)
	@rc=0; for b in stateless count_sum tumbling join restore workers; do \
	  echo "$(VENV)/bin/python bench/$$b.py $(BENCH_ARGS)"; \
	  $(VENV)/bin/python bench/$$b.py $(BENCH_ARGS); r=$$?; [ $$r -gt $$rc ] && rc=$$r; \
	  echo; \
	done; $(VENV)/bin/python bench/harness.py; exit $$rc

bench-more: $(STAMP)
	@rc=0; for b in snapshot compaction latency backpressure reprocess scaling; do \
	  echo "$(VENV)/bin/python bench/$$b.py"; \
	  $(VENV)/bin/python bench/$$b.py; r=$$?; [ $$r -gt $$rc ] && rc=$$r; \
	  echo; \
	done; exit $$rc

$(DAGSTER_HOME)/dagster.yaml: dagster.yaml
	@mkdir -p $(DAGSTER_HOME)
	cp dagster.yaml $@

# The webserver and the daemon (schedules, sensors, backfills) as two processes, as `dagster dev` runs them, without
# its notices meant for other layouts (its successor `dg dev`; a dagster.yaml in the current folder: the template).
ui: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	@export DAGSTER_HOME=$(DAGSTER_HOME); \
	$(VENV)/bin/dagster-daemon run -w workspace.yaml & daemon=$$!; \
	trap 'kill $$daemon 2>/dev/null' EXIT INT TERM; \
	$(VENV)/bin/dagster-webserver -w workspace.yaml -h 127.0.0.1 -p $(UI_PORT)

clean:
	rm -rf .brook .dagster .pytest_cache .ruff_cache .mypy_cache build *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +
