"""A database that cannot be reached, or refuses a statement, as an API caller sees it: a 503 saying which, with an
``error_id`` for the server log, and never the driver's text (it names the server's socket path, host or port)."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from rag_pipeline.web import dependencies
from rag_pipeline.web.api import health
from rag_pipeline_tests.web.inprocess.conftest import covers

MISSING_SOCKET = "/nonexistent-socket-dir-of-the-test"


@pytest.fixture
def unreachable(engine):
    """An engine of the session's database whose connections go to a socket folder that does not exist."""
    gone = sa.create_engine(engine.url, poolclass=NullPool)

    @sa.event.listens_for(gone, "do_connect")
    def _connect(_dialect, _record, _cargs, cparams):
        cparams["host"] = MISSING_SOCKET

    yield gone
    gone.dispose()


def _no_server_detail(text: str) -> None:
    assert "nonexistent" not in text and ".s.PGSQL" not in text and "socket" not in text, text


@covers("GET /api/v1/knowledge-bases")
def test_an_unreachable_database_is_a_503_naming_no_socket(client, app, unreachable, caplog):
    app.dependency_overrides[dependencies.engine] = lambda: unreachable
    try:
        with caplog.at_level(logging.ERROR, logger="rag_pipeline.web"):
            resp = client.get("/api/v1/knowledge-bases")
    finally:
        app.dependency_overrides.pop(dependencies.engine, None)
    assert resp.status_code == 503, resp.text
    _no_server_detail(resp.text)
    body = resp.json()
    assert body["detail"].startswith("database error: the database cannot be reached"), body
    assert body["error_id"] and body["error_id"] in body["detail"]
    logged = [r.getMessage() for r in caplog.records if body["error_id"] in r.getMessage()]
    assert logged and MISSING_SOCKET in logged[0], "the server log keeps the driver's message under the id"


@covers("GET /healthz")
def test_healthz_says_unreachable_without_the_socket_path(client, unreachable, monkeypatch):
    monkeypatch.setattr(health, "get_engine", lambda: unreachable)
    resp = client.get("/healthz")
    assert resp.status_code == 503, resp.text
    _no_server_detail(resp.text)
    assert resp.json()["database"] == "the database cannot be reached"


@covers("GET /api/v1/knowledge-bases")
def test_a_refused_statement_names_its_sqlstate_not_the_server(client, app, engine):
    """A statement the server refuses (here: its tables are not on the search path) is a 503 naming the SQLSTATE,
    not the statement or the relation."""
    refusing = sa.create_engine(engine.url, poolclass=NullPool)

    @sa.event.listens_for(refusing, "connect")
    def _refuse(dbapi_connection, _record):
        with dbapi_connection.cursor() as cur:
            cur.execute("SET search_path TO a_schema_that_does_not_exist")

    app.dependency_overrides[dependencies.engine] = lambda: refusing
    try:
        resp = client.get("/api/v1/knowledge-bases")
    finally:
        app.dependency_overrides.pop(dependencies.engine, None)
        refusing.dispose()
    if resp.status_code == 200:
        pytest.fail("the listing read tables outside the search path; the test needs another refusal")
    assert resp.status_code == 503, resp.text
    assert "SQLSTATE" in resp.json()["detail"], resp.text
    assert "a_schema_that_does_not_exist" not in resp.text and "relation" not in resp.text
