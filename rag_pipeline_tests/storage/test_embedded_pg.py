"""The embedded server boots with the tuned settings, honours the override, and never restarts a running server.

Each test starts its own server in a scratch directory, so it runs whatever database the session uses."""

from __future__ import annotations

import tempfile
from pathlib import Path

import psycopg
import pytest

from rag_pipeline.storage import embedded_server as embedded_pg

# each test starts its own embedded servers
pytestmark = pytest.mark.db


def _setting(uri: str, name: str) -> int:
    with psycopg.connect(uri) as conn:
        return conn.execute("SELECT pg_size_bytes(current_setting(%s))", (name,)).fetchone()[0]


def _size(text: str) -> int:
    units = {"kB": 2**10, "MB": 2**20, "GB": 2**30}
    return int(text[:-2]) * units[text[-2:]]


@pytest.fixture
def pgdata():
    # Outside /root and short (unix socket path limit); removed by the OS' tmp cleaning, stopped here.
    path = Path(tempfile.mkdtemp(prefix="rag_pg_")) / "d"
    yield path
    embedded_pg.stop(path)


def test_fresh_server_gets_tuned_settings_and_override_applies_at_next_start(pgdata, monkeypatch):
    monkeypatch.delenv("RAG_PG_SHARED_BUFFERS", raising=False)
    uri = embedded_pg.start(pgdata)
    tuned = embedded_pg.tuned_settings()
    for name, value in tuned.items():
        assert _setting(uri, name) == _size(value), name
    assert 128 * 2**20 <= _size(tuned["shared_buffers"]) <= 2**30

    # A running server is not restarted by another start(): the override waits for the next boot.
    monkeypatch.setenv("RAG_PG_SHARED_BUFFERS", "192MB")
    uri = embedded_pg.start(pgdata)
    assert _setting(uri, "shared_buffers") == _size(tuned["shared_buffers"])
    assert embedded_pg.stop(pgdata)
    uri = embedded_pg.start(pgdata)
    assert _setting(uri, "shared_buffers") == 192 * 2**20


def test_bad_override_is_refused_with_its_name(pgdata, monkeypatch):
    monkeypatch.setenv("RAG_PG_SHARED_BUFFERS", "1GB; DROP TABLE x")
    with pytest.raises(ValueError, match="(?i)shared_buffers must be a size"):
        embedded_pg.start(pgdata)


def test_a_command_that_boots_the_server_says_so_and_writes_env(tmp_path):
    """Any CLI command may start a stopped embedded server: it prints one line saying so and, for the project's
    own server, writes the .env the dagster commands need (so they work afterwards too)."""
    import os
    import subprocess
    import sys

    project = Path(tempfile.mkdtemp(prefix="rag_proj_"))  # short: the socket lives in <project>/.rag_pipeline
    env = {k: v for k, v in os.environ.items() if k not in ("RAG_DATABASE_URL", "RAG_PGDATA", "RAG_DAGSTER_PG_URL")}
    env["RAG_PROJECT_ROOT"] = str(project)
    rag = Path(sys.executable).with_name("rag-pipeline")
    try:
        proc = subprocess.run([str(rag), "runs"], cwd=project, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.count("rag-pipeline: started the embedded PostgreSQL in ") == 1, proc.stderr
        assert f"wrote {project / '.env'}" in proc.stderr
        written = (project / ".env").read_text(encoding="utf-8")
        assert f"DAGSTER_HOME={project}" in written and "RAG_DAGSTER_PG_URL=postgresql+psycopg2://" in written
        again = subprocess.run([str(rag), "runs"], cwd=project, env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0 and "started the embedded" not in again.stderr, "a running server: silent"
    finally:
        embedded_pg.stop(project / ".rag_pipeline" / "pgdata")
