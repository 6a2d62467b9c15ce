# One command runs the product (`make demo` / `make dev`), one runs the tests (`make test`).
# Each target creates .venv and installs the project into it when needed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install dev demo test test-fast test-external lint bench chaos model mutants clean

# Python caches compiled modules in __pycache__ (ignored by git) unless PYTHONDONTWRITEBYTECODE is
# set, as some machines' environments do. Then every Python process a target starts compiled the
# package from source again: the CLI, each document sandbox, Dagster's and celery's workers,
# hundreds in a test run; `invoice-pipeline --help` 0.60 -> 0.43 CPU-s. The sabotage runner sets
# it again for its altered copies of the tree (pipeline_support/mutants.py).
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

dev: install
	$(BIN)/invoice-pipeline dev

demo: install
	$(BIN)/invoice-pipeline demo

# In parallel workers (pytest-xdist), each with its own embedded PostgreSQL; tests that share a
# server or take the machine run on one worker, longest first, and podman's images are built in the
# background (invoice_pipeline_tests/scheduling.py).
# One worker per core and one more: with one per core, a fifth of a quiet 2-core machine's CPU sat
# idle while tests waited on servers, clusters and deadlines (3 workers: 717 -> 631 s).
# TEST_WORKERS=0 runs in this process. docs/tests.md: the layout and the measured durations.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
XDIST = -n $(TEST_WORKERS) --dist loadgroup

# Every run ends with its 30 slowest tests (docs/tests.md publishes them).
test: install
	$(BIN)/python -m invoice_pipeline_tests.browser_setup
	$(BIN)/pytest $(XDIST) --durations=30 $(PYTEST_ARGS)

# The inner loop: unit and property tests that need no server beyond PostgreSQL (the domain, the
# engine on the database, migrations, document reading, samples, the models' replays), without
# those marked slow (docs/tests.md: what is left out and why). A couple of minutes.
FAST_TESTS = invoice_pipeline_tests/domain invoice_pipeline_tests/engine invoice_pipeline_tests/db \
	invoice_pipeline_tests/documents invoice_pipeline_tests/samples invoice_pipeline_tests/model \
	invoice_pipeline_tests/test_architecture.py invoice_pipeline_tests/test_needs_tool.py

test-fast: install
	$(BIN)/pytest $(XDIST) -m "not slow" $(FAST_TESTS) $(PYTEST_ARGS)

# The core suite against an external server (this machine also runs PostgreSQL on 5432).
test-external: install
	INVOICE_PIPELINE_DATABASE_URL=$${INVOICE_PIPELINE_DATABASE_URL:-postgresql://postgres@127.0.0.1:5432/postgres} \
		$(BIN)/pytest $(XDIST) invoice_pipeline_tests/db invoice_pipeline_tests/engine/test_locks.py invoice_pipeline_tests/engine/test_dedupe.py $(PYTEST_ARGS)

# Last, the code location loads as Dagster's project CLI sees it ([tool.dg] in pyproject.toml); the
# project has no component YAML for it to check.
lint: install
	$(BIN)/ruff check invoice_pipeline invoice_pipeline_tests benchmarks chaos pipeline_support model
	$(BIN)/ruff format --check invoice_pipeline invoice_pipeline_tests benchmarks chaos pipeline_support model
	$(BIN)/mypy
	VIRTUAL_ENV=$(abspath $(VENV)) $(BIN)/dg check defs --no-check-yaml

bench: install
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

# The property tests (pytest -m hypothesis) under the "chaos" Hypothesis profile: new random
# examples every run, more of them, and a failure printed with its @reproduce_failure blob
# (`make test` uses the derandomized "fixed" profile; see invoice_pipeline_tests/conftest.py).
# Then the reliability scenarios. Both always run; either failing fails the target.
chaos: install
	@status=0; \
	HYPOTHESIS_PROFILE=chaos $(BIN)/pytest -m hypothesis -q invoice_pipeline_tests $(CHAOS_PYTEST_ARGS) || status=1; \
	$(BIN)/python -m chaos $(CHAOS_ARGS) || status=1; \
	exit $$status

# Spin on the protocol model (model/protocol.pml) and the payment model (model/payment.pml): every
# property must verify, every mutant must fail, and each mutant's counterexample is written to
# model/trails/ (the replay tests' input).
# Installs spin and a C compiler with apt-get when missing and run as root. A few minutes at most.
model:
	$(PYTHON) model/run.py

# The standing sabotage check (pipeline_support/mutants.py): each safety mechanism broken in a
# temporary copy, and its test must fail. MUTANTS_ARGS=--today runs the day's rotating subset
# (what CI runs); the default is the whole list, written to benchmarks/results/mutants.json.
MUTANTS_ARGS ?= --all --out benchmarks/results/mutants.json
mutants: install
	$(BIN)/python -m pipeline_support.mutants $(MUTANTS_ARGS)

clean:
	rm -rf $(VENV) .invoice_pipeline .pytest_cache .mypy_cache .ruff_cache
