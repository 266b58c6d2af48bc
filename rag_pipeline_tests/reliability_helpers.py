"""Helpers of the fault, concurrency and security tests: tagged connections, a second session that can
see / lock / terminate them, polling with timeouts (the machine may be slow), and a global invariant."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from rag_pipeline.storage.engine import database_url, get_engine

# Tables the evaluation only ever reads (their row counts must not change during an evaluation).
KB_TABLES = ("knowledge_bases", "documents", "document_chunks", "chunk_embeddings", "chunk_terms",
             "knowledge_base_term_stats", "embedding_models")


def wait_until(predicate: Callable[[], object], *, timeout: float, what: str, interval: float = 0.05):
    """Poll ``predicate`` until it returns something truthy (returned) or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _url(application_name: str) -> sa.URL:
    """The test database with this ``application_name`` (whatever RAG_DATABASE_URL a test has set)."""
    return make_url(database_url()).update_query_dict({"application_name": application_name})


def tagged_url(tag: str) -> tuple[str, str]:
    """(SQLAlchemy URL of the test database whose connections carry ``application_name``, that name)."""
    name = f"rag-test-{tag}-{uuid.uuid4().hex[:8]}"
    return _url(name).render_as_string(hide_password=False), name


def tagged_engine(tag: str) -> tuple[sa.Engine, str]:
    """An engine of the product (:func:`get_engine`, same hooks) whose backends are recognisable in
    ``pg_stat_activity`` by their ``application_name``."""
    url, name = tagged_url(tag)
    return get_engine(url, migrate=False), name


@contextlib.contextmanager
def admin() -> Iterator[sa.Connection]:
    """Another session (autocommit, not pooled) to watch and terminate the product's connections."""
    engine = sa.create_engine(_url("rag-test-admin"), isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def backends(conn: sa.Connection, application_name: str) -> list[sa.Row]:
    return conn.execute(sa.text(
        "SELECT pid, state, backend_xid IS NOT NULL AS has_written, wait_event_type, query "
        "FROM pg_stat_activity WHERE application_name = :n AND pid <> pg_backend_pid()"),
        {"n": application_name}).all()


def terminate(conn: sa.Connection, pids) -> None:
    """``pg_terminate_backend`` each pid and wait (up to 10 s each) until it is gone."""
    for pid in pids:
        conn.execute(sa.text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": pid})


@contextlib.contextmanager
def blocked_writes(table: str) -> Iterator[sa.Connection]:
    """Hold a SHARE lock on ``table`` (readers pass, writers wait) until the block ends.

    Used as a deterministic barrier: an evaluation run stops at its first COPY into ``table`` with its
    run row committed as ``running`` and its transactions open, however slow the machine is.
    """
    if table not in ("retrieval_evaluation_candidates", "retrieval_evaluation_case_results"):
        raise ValueError(table)
    if table == "retrieval_evaluation_candidates":  # the seed's name is a view: lock its storage (every partition)
        table = "retrieval_evaluation_candidate_rows"
    engine = sa.create_engine(_url("rag-test-lock"), poolclass=NullPool)
    try:
        with engine.connect() as conn, conn.begin():
            conn.execute(sa.text("SET LOCAL lock_timeout = '30s'"))
            conn.execute(sa.text(f"LOCK TABLE {table} IN SHARE MODE"))
            yield conn
    finally:
        engine.dispose()


def waiting_on(conn: sa.Connection, holder: sa.Connection) -> list[sa.Row]:
    """Backends blocked by the session ``holder`` (pid, application_name, query)."""
    me = holder.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
    return conn.execute(sa.text(
        "SELECT pid, application_name, query FROM pg_stat_activity WHERE :me = ANY(pg_blocking_pids(pid))"),
        {"me": me}).all()


def assert_no_partial_succeeded_runs(engine: sa.Engine) -> int:
    """Every ``succeeded`` run has exactly its stored candidate_count candidates and case_count case
    results; no other run has any result row. Returns the number of runs checked."""
    with engine.connect() as conn:
        rows = conn.execute(sa.text("""
            SELECT r.id, r.status, r.case_count, r.candidate_count,
                   (SELECT count(*) FROM retrieval_evaluation_candidates c WHERE c.evaluation_run_id = r.id) AS cands,
                   (SELECT count(*) FROM retrieval_evaluation_case_results c WHERE c.evaluation_run_id = r.id) AS cases
            FROM retrieval_evaluation_runs r""")).all()
    for r in rows:
        if r.status == "succeeded":
            assert (r.cands, r.cases) == (r.candidate_count, r.case_count), f"partial succeeded run {r.id}"
        else:
            assert (r.cands, r.cases) == (0, 0), f"{r.status} run {r.id} has result rows"
    return len(rows)


def kb_counts(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one() for t in KB_TABLES}


def closed_tcp_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_database(url: str, name: str, driver: str | None = None) -> str:
    """``url`` pointing at database ``name`` (and at the SQLAlchemy ``driver``, e.g. psycopg2, if given)."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+")[0] + (f"+{driver}" if driver else "")
    return urlunsplit(parts._replace(scheme=scheme, path="/" + name))


@contextlib.contextmanager
def scratch_database(prefix: str) -> Iterator[tuple[str, str]]:
    """A new, empty database on the test server (dropped afterwards): (libpq URL, SQLAlchemy URL)."""
    import os

    from rag_pipeline.storage import embedded_server

    server = os.environ.get("RAG_DATABASE_URL") or embedded_server.start()
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin_engine = sa.create_engine(with_database(server, "postgres", "psycopg"), isolation_level="AUTOCOMMIT")
    with admin_engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield with_database(server, name), with_database(server, name, "psycopg")
    finally:
        with admin_engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin_engine.dispose()


@contextlib.contextmanager
def cli_evaluation_held_mid_run(path, cwd, app: str, env: dict) -> Iterator[subprocess.Popen]:
    """``rag-pipeline evaluate --strategy keyword-v1`` on ``path`` in a child process (``PGAPPNAME`` = ``app``),
    held mid-run: its first result write waits on a lock held here. Yields the process once it waits (its run
    row is committed as ``running``); on exit a still-running process is killed and its stderr closed."""
    rag = Path(sys.executable).with_name("rag-pipeline")
    with blocked_writes("retrieval_evaluation_case_results") as lock, admin() as conn:
        proc = subprocess.Popen([str(rag), "evaluate", "--dataset", str(path), "--strategy", "keyword-v1", "--quiet"],
                                env={**env, "PGAPPNAME": app}, cwd=cwd, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        try:
            wait_until(lambda: proc.poll() is not None or any(r.application_name == app
                                                              for r in waiting_on(conn, lock)),
                       timeout=180, what="the CLI process to be mid-run")
            assert proc.poll() is None, proc.stderr.read().decode()
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stderr.close()
