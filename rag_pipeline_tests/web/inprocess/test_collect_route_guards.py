"""The collect route over HTTP calls only what the operator allowed: an endpoint of ``RAG_COLLECT_ENDPOINTS`` (or
a public address with ``RAG_COLLECT_PUBLIC_ENDPOINTS=1``), an ``env:`` variable of ``RAG_COLLECT_ENV`` (never
``RAG_*``, one error for a variable not allowed and one not set); it quotes no reply in an error, its schema caps
the endpoint's settings, and collected answers survive a database that goes away (docs/http-api.md,
docs/failure-behaviour.md). Every endpoint is a real local server (or an address nothing is asked at)."""

from __future__ import annotations

import json
import threading
import time

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from rag_pipeline.service import answers
from rag_pipeline.web import dependencies
from rag_pipeline_tests.answers.rag_endpoint_server import RagEndpoint
from rag_pipeline_tests.eval_helpers import write_dataset
from rag_pipeline_tests.web.inprocess.conftest import covers

API = "/api/v1"
NAME = "inproc-collect-guards"
ROUTE = f"{API}/datasets/{NAME}/answers/collect"


@pytest.fixture(scope="module")
def kb(engine, evaluated, tmp_path_factory) -> str:
    """Dataset ``inproc-collect-guards`` (three cases) stored for the in-process knowledge base."""
    chunks, kb = evaluated["chunks"], evaluated["kb"]
    cases = [{"case_id": f"c{i}", "question": f"Question {i}?", "k": 3, "relevant_chunk_ids": [chunks["backup.md"]]}
             for i in range(3)]
    folder = tmp_path_factory.mktemp("collect-guards")
    dataset = write_dataset(folder / "x.json", kb, cases, name=NAME)
    lines = folder / "a.jsonl"
    lines.write_text("".join(json.dumps({"case_id": c["case_id"], "answer": "x"}) + "\n" for c in cases),
                     encoding="utf-8")
    answers.evaluate_answers(engine, kb, dataset, lines, answerer="seed")  # stores the dataset
    return kb


@pytest.fixture
def rag(monkeypatch):
    """A real RAG endpoint on 127.0.0.1 that the operator allowed (``RAG_COLLECT_ENDPOINTS``)."""
    with RagEndpoint() as endpoint:
        monkeypatch.setenv("RAG_COLLECT_ENDPOINTS", endpoint.url)
        yield endpoint


def _ask(client, kb: str, endpoint: dict, headers: dict | None = None, **extra):
    return client.post(ROUTE, json={"knowledge_base": kb, "endpoint": endpoint, **extra}, headers=headers)


@covers("POST /api/v1/datasets/{name}/answers/collect")
def test_env_headers_read_only_allowed_variables_and_never_rag_settings(client, kb, rag, monkeypatch):
    """``env:RAG_*`` is refused even when a pattern would match it; a variable not allowed and one not set give
    the same error, which names neither value; nothing is asked."""
    monkeypatch.setenv("RAG_JUDGE_API_KEY", "judge-secret-0123")
    monkeypatch.setenv("RAG_API_TOKEN", "api-token-secret-0123")  # the server's own token: never readable
    auth = {"Authorization": "Bearer api-token-secret-0123"}
    monkeypatch.setenv("NOT_ALLOWED_SECRET", "other-secret-0123")
    monkeypatch.setenv("COLLECT_OK_TOKEN", "allowed-secret-0123")
    monkeypatch.setenv("RAG_COLLECT_ENV", "COLLECT_OK_*")
    errors = {}
    for variable in ("RAG_DAGSTER_PG_URL", "RAG_JUDGE_API_KEY", "RAG_API_TOKEN", "NOT_ALLOWED_SECRET",
                     "COLLECT_OK_MISSING", "MISSING_VARIABLE_XYZ"):
        resp = _ask(client, kb, {"url": rag.url, "headers": [f"X-Leak: env:{variable}"], "retries": 0}, auth)
        assert resp.status_code == 422, (variable, resp.text)
        assert "secret" not in resp.text
        errors[variable] = resp.json()["detail"]
    assert len(set(errors.values())) == 1, errors  # existing, missing, RAG_*: one answer
    assert "RAG_COLLECT_ENV" in errors["NOT_ALLOWED_SECRET"]
    assert sum(rag.requests.values()) == 0
    ok = _ask(client, kb, {"url": rag.url, "headers": ["X-Token: env:COLLECT_OK_TOKEN"], "retries": 0}, auth,
              store=False)
    assert ok.status_code == 200, ok.text
    assert ok.json()["collection"]["answered"] == 3 and "allowed-secret" not in ok.text


def test_the_pattern_setting_cannot_name_rag_variables(monkeypatch):
    """An operator's ``RAG_COLLECT_ENV=RAG_*`` is a settings error naming the variable, not a way to read them;
    ``*`` reads no ``RAG_*`` variable either."""
    from rag_pipeline.settings import SettingsError, get_settings
    from rag_pipeline.storage.http.guard import api_environ

    for value in ("RAG_*", "RAG_API_TOKEN", "X, rag_judge_api_key"):
        monkeypatch.setenv("RAG_COLLECT_ENV", value)
        with pytest.raises(SettingsError, match="RAG_COLLECT_ENV"):
            get_settings()
    monkeypatch.setenv("RAG_COLLECT_ENV", "*")
    monkeypatch.setenv("RAG_JUDGE_API_KEY", "judge-secret-0123")
    monkeypatch.setenv("COLLECT_OK_TOKEN", "allowed-secret-0123")
    readable = api_environ()
    assert readable["COLLECT_OK_TOKEN"] == "allowed-secret-0123"
    assert not [k for k in readable if k.upper().startswith("RAG_")]


@covers("POST /api/v1/datasets/{name}/answers/collect")
@pytest.mark.parametrize("url", [  # loopback forms only: a regression must not send traffic beyond this machine
    "http://[::ffff:127.0.0.1]:{port}/rag",
    "http://0x7f000001:{port}/rag",
    "http://2130706433:{port}/rag",
    "http://127.0.0.1:{port}/rag",
    "http://localhost:{port}/rag",
    "http://[::1]:{port}/rag",
    "http://0.0.0.0:{port}/rag",
])
def test_an_endpoint_the_operator_did_not_allow_is_403_and_never_asked(client, kb, url, monkeypatch):
    """Not listed: refused whatever form the address takes, with and without the public opt-in (these are not
    public addresses), and no request reaches the endpoint. The link-local and private forms (169.254.169.254 ...)
    are refused before any connection: rag_pipeline_tests/answers/test_endpoint_guard.py."""
    with RagEndpoint() as rag:
        url = url.format(port=rag.url.split(":")[2].split("/")[0])
        for public in ("0", "1"):
            monkeypatch.setenv("RAG_COLLECT_PUBLIC_ENDPOINTS", public)
            resp = _ask(client, kb, {"url": url, "retries": 0, "method": "POST",
                                     "request_template": '{"query": "mutation { launchRun }"}'})
            assert resp.status_code == 403, (url, public, resp.text)
            assert resp.json()["title"] == "Endpoint not allowed"
            assert "RAG_COLLECT_ENDPOINTS" in resp.json()["detail"]
        assert sum(rag.requests.values()) == 0


@covers("POST /api/v1/datasets/{name}/answers/collect")
def test_a_listed_base_allows_its_paths_only(client, kb, monkeypatch):
    with RagEndpoint() as rag:
        base = rag.url.removesuffix("/rag")
        monkeypatch.setenv("RAG_COLLECT_ENDPOINTS", f"{base}/rag")
        assert _ask(client, kb, {"url": f"{base}/ragged", "retries": 0}).status_code == 403
        assert _ask(client, kb, {"url": f"{base}/graphql", "retries": 0}).status_code == 403
        assert _ask(client, kb, {"url": f"{base.replace('127.0.0.1', 'localhost')}/rag"}).status_code == 403
        assert _ask(client, kb, {"url": "http://{question}.example/rag"}).status_code == 403
        assert sum(rag.requests.values()) == 0
        ok = _ask(client, kb, {"url": f"{base}/rag?case={{case_id}}", "retries": 0}, store=False)
        assert ok.status_code == 200 and ok.json()["collection"]["answered"] == 3


@covers("POST /api/v1/datasets/{name}/answers/collect")
def test_an_upstream_error_is_not_quoted_back(client, kb, monkeypatch):
    """The reply of a failing endpoint (here echoing the request's headers) is not read back to the caller."""
    monkeypatch.setenv("COLLECT_OK_TOKEN", "allowed-secret-0123")
    monkeypatch.setenv("RAG_COLLECT_ENV", "COLLECT_OK_TOKEN")
    before = set(_kept_files())  # other workers' collections share the folder: only this one's file is touched
    with RagEndpoint(plan={f"c{i}": ["500-echo"] for i in range(3)}) as rag:
        monkeypatch.setenv("RAG_COLLECT_ENDPOINTS", rag.url)
        resp = _ask(client, kb, {"url": rag.url, "retries": 0, "headers": ["X-Token: env:COLLECT_OK_TOKEN"]})
    assert resp.status_code == 200, resp.text
    collection = resp.json()["collection"]
    assert collection["status"] == "failed" and "HTTP 500" in collection["reason"]
    assert "echo" not in resp.text and "X-Token" not in resp.text and "allowed-secret" not in resp.text
    kept = [path for path in _kept_files() if path not in before]
    assert len(kept) == 1, "the failed collection's lines are kept for a resume"
    for path in kept:
        path.unlink()


def _kept_files() -> list:
    from rag_pipeline.settings import project_root

    return sorted((project_root() / ".rag_pipeline" / "api-collections").glob("*.jsonl"))


def test_the_schema_caps_an_api_endpoint_tighter_than_the_cli(app):
    schemas = app.openapi()["components"]["schemas"]
    fields = schemas["ApiEndpointConfig"]["properties"]
    assert (fields["timeout_s"]["maximum"], fields["retries"]["maximum"], fields["max_wait_s"]["maximum"],
            fields["concurrency"]["maximum"]) == (60, 5, 30, 16)
    responses = app.openapi()["paths"][ROUTE.replace(NAME, "{name}")]["post"]["responses"]
    assert {"403", "409", "429", "503"} <= set(responses)


@covers("POST /api/v1/datasets/{name}/answers/collect")
def test_over_the_caps_is_422(client, kb, rag):
    for field, value in (("timeout_s", 3600), ("retries", 20), ("max_wait_s", 600), ("concurrency", 256)):
        resp = _ask(client, kb, {"url": rag.url, field: value})
        assert resp.status_code == 422 and field in resp.text, (field, resp.text)
    assert sum(rag.requests.values()) == 0


@covers("POST /api/v1/datasets/{name}/answers/collect")
def test_a_database_that_goes_away_keeps_the_answers_and_names_no_path(client, app, engine, kb, monkeypatch):
    """The database goes away while the endpoint answers: 503 without the driver's message (its socket path),
    the answers are kept, and the same request, with the database back, stores them without asking again."""
    gone = threading.Event()
    before = set(_kept_files())
    flaky = sa.create_engine(engine.url, poolclass=NullPool)

    @sa.event.listens_for(flaky, "do_connect")
    def _connect(_dialect, _record, _cargs, cparams):
        if gone.is_set():
            cparams["host"] = "/nonexistent-socket-dir-of-the-test"

    app.dependency_overrides[dependencies.engine] = lambda: flaky
    try:
        with RagEndpoint(delay=0.5) as rag:
            monkeypatch.setenv("RAG_COLLECT_ENDPOINTS", rag.url)
            endpoint = {"url": rag.url, "retries": 0, "concurrency": 1}

            def break_it() -> None:
                deadline = time.monotonic() + 30
                while not rag.requests and time.monotonic() < deadline:
                    time.sleep(0.01)
                gone.set()

            breaker = threading.Thread(target=break_it)
            breaker.start()
            resp = _ask(client, kb, endpoint)
            breaker.join()
            assert resp.status_code == 503, resp.text
            detail = resp.json()["detail"]
            assert "nonexistent" not in resp.text and ".s.PGSQL" not in resp.text and "/" not in detail
            assert "3 answer line(s) collected are kept" in detail and resp.headers["retry-after"]
            assert sum(rag.requests.values()) == 3
            gone.clear()
            again = _ask(client, kb, endpoint)
            assert again.status_code == 201, again.text
            assert again.json()["collection"]["skipped_existing"] == 3
            assert sum(rag.requests.values()) == 3, "the kept answers were not asked again"
    finally:
        app.dependency_overrides.pop(dependencies.engine, None)
        flaky.dispose()
    assert set(_kept_files()) <= before, "stored: the kept file is removed"


@covers("POST /api/v1/datasets/{name}/answers/collect", "GET /api/v1/answer-runs/{run_id}")
def test_a_huge_reply_is_read_up_to_the_api_cap_only(client, kb, monkeypatch):
    """A 50 MB reply: the API reads 2 MB of it (the CLI 8 MB), records the case as an error and goes on."""
    with RagEndpoint(plan={"c1": ["huge"]}) as rag:
        monkeypatch.setenv("RAG_COLLECT_ENDPOINTS", rag.url)
        resp = _ask(client, kb, {"url": rag.url, "retries": 0})
    assert resp.status_code == 201, resp.text
    collection = resp.json()["collection"]
    assert (collection["answered"], collection["errors"], collection["status"]) == (2, 1, "succeeded")
    cases = client.get(resp.headers["location"]).json()["cases"]
    errors = [c for c in cases if c["case_id"] == "c1"]
    assert "longer than 2 MB" in json.dumps(errors), errors
