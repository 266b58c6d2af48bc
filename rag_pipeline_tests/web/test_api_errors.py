"""Errors of the API over real HTTP: RFC 9457 problem details with the CLI's messages, never a traceback.

Every file of the malformed-dataset corpus, uploaded, is refused with 422 listing exactly the problems the CLI
lists for that file (case index, case_id, field, message), and nothing is stored."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import pytest
import requests
import sqlalchemy as sa

from rag_pipeline.evaluation.datasets.load import DatasetError, load_dataset

# the server fixture; 58 uploads of the malformed corpus
pytestmark = [pytest.mark.db, pytest.mark.slow]

BAD = Path(__file__).resolve().parents[1] / "data" / "bad_datasets"
CORPUS = sorted(BAD.glob("*.json"))
PROBLEM = "application/problem+json"


def _problem(response: requests.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM), response.headers
    body = response.json()
    assert body["status"] == status and body["title"] and body["detail"], body
    text = response.text
    assert "Traceback" not in text and 'File "' not in text and ".py\"" not in text, text
    return body


def _stored_counts(engine) -> tuple[int, int]:
    with engine.connect() as conn:
        return (conn.execute(sa.text("SELECT count(*) FROM retrieval_evaluation_datasets")).scalar_one(),
                conn.execute(sa.text("SELECT count(*) FROM retrieval_evaluation_runs")).scalar_one())


def _cli_problems(path: Path, kb: str) -> list[dict] | None:
    try:
        load_dataset(path, knowledge_base=kb)
    except DatasetError as exc:
        return [{"message": p.message, "case_index": p.case_index, "case_id": p.case_id, "field": p.field,
                 "line": p.describe(path.name)} for p in exc.problems]
    return None


def test_the_corpus_is_there():
    assert len(CORPUS) >= 50


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_every_malformed_upload_is_refused_with_every_problem_and_nothing_stored(live_server, demo_kb, engine, path):
    expected = _cli_problems(path, demo_kb)
    before = _stored_counts(engine)
    response = requests.post(f"{live_server}/api/v1/knowledge-bases/{demo_kb}/retrieval/datasets",
                             files={"file": (path.name, path.read_bytes(), "application/json")}, timeout=60)
    if expected is None:  # valid once the knowledge base is given (a bare array: the path names the KB)
        assert response.status_code in (200, 201), response.text
        return
    body = _problem(response, 422)
    got = [{k: p[k] for k in ("message", "case_index", "case_id", "field", "line")} for p in body["errors"]]
    assert got == expected
    assert body["detail"].startswith("invalid dataset " + path.name)
    assert _stored_counts(engine) == before


def test_a_json_body_is_validated_like_the_file(live_server, demo_kb, engine):
    path = BAD / "many_problems.json"
    before = _stored_counts(engine)
    response = requests.post(f"{live_server}/api/v1/knowledge-bases/{demo_kb}/retrieval/datasets",
                             params={"name": path.stem}, data=path.read_bytes(),
                             headers={"Content-Type": "application/json"}, timeout=60)
    body = _problem(response, 422)
    expected = _cli_problems(path, demo_kb)
    assert [(p["case_index"], p["field"], p["message"]) for p in body["errors"]] == [
        (p["case_index"], p["field"], p["message"]) for p in expected]
    assert len(body["errors"]) > 3
    assert _stored_counts(engine) == before


def test_inline_cases_of_evaluate_are_validated_like_a_file(live_server, demo_kb, engine):
    before = _stored_counts(engine)
    response = requests.post(f"{live_server}/api/v1/knowledge-bases/{demo_kb}/retrieval/evaluate", json={
        "name": "inline-bad", "strategy_versions": ["keyword-v1"],
        "cases": [{"case_id": "a", "question": "q", "relevant_chunk_ids": ["not-a-uuid"], "k": 0},
                  {"case_id": "a", "question": "", "relevant_chunk_ids": [], "k": 3}]}, timeout=60)
    body = _problem(response, 422)
    fields = {(p["case_index"], p["field"]) for p in body["errors"]}
    assert {(0, "k"), (0, "relevant_chunk_ids[0]"), (1, "case_id"), (1, "question"),
            (1, "relevant_chunk_ids")} <= fields
    assert _stored_counts(engine) == before


def test_unknown_knowledge_base_run_case_dataset_strategy(live_server, demo_kb, engine):
    api = f"{live_server}/api/v1"
    before = _stored_counts(engine)
    body = _problem(requests.get(f"{api}/knowledge-bases/no-such-kb/retrieval/runs", timeout=60), 404)
    assert body["detail"].startswith("unknown knowledge base 'no-such-kb'; known: ") and demo_kb in body["detail"]
    _problem(requests.post(f"{api}/knowledge-bases/no-such-kb/retrieval/evaluate", json={"dataset": "demo"},
                           timeout=60), 404)
    body = _problem(requests.get(f"{api}/retrieval/evaluations/00000000-0000-4000-8000-000000000000", timeout=60), 404)
    assert "no evaluation run" in body["detail"]
    body = _problem(requests.get(f"{api}/retrieval/evaluations/zz", timeout=60), 404)
    assert "is not a run id" in body["detail"]
    body = _problem(requests.post(f"{api}/knowledge-bases/{demo_kb}/retrieval/evaluate",
                                  json={"dataset": "never-uploaded"}, timeout=60), 404)
    assert "no dataset 'never-uploaded'" in body["detail"]
    body = _problem(requests.post(f"{api}/knowledge-bases/{demo_kb}/retrieval/evaluate",
                                  json={"dataset": "demo", "strategy_versions": ["nope-v9", "vector-minilm-v1"]},
                                  timeout=60), 422)
    assert "unknown strategy version 'nope-v9'" in body["detail"]
    assert "vector-minilm-v1 cannot run on knowledge base 'demo'" in body["detail"]
    body = _problem(requests.get(f"{api}/retrieval/comparisons", params={"dataset": "never-uploaded"},
                                 timeout=60), 404)
    assert _stored_counts(engine) == before


def test_request_validation_is_a_problem_listing_each_field(live_server, demo_kb):
    api = f"{live_server}/api/v1"
    body = _problem(requests.get(f"{api}/retrieval/evaluations/abcd1234", params={"candidates": "some",
                                                                                  "limit": 0}, timeout=60), 422)
    assert {p["field"] for p in body["errors"]} == {"candidates", "limit"}
    body = _problem(requests.post(f"{api}/knowledge-bases/{demo_kb}/retrieval/evaluate",
                                  json={"dataset": "demo", "cases": []}, timeout=60), 422)
    assert "either `dataset`" in body["detail"]
    body = _problem(requests.post(f"{api}/knowledge-bases/{demo_kb}/retrieval/evaluate", data="{not json",
                                  headers={"Content-Type": "application/json"}, timeout=60), 422)
    body = _problem(requests.post(f"{api}/knowledge-bases/{demo_kb}/retrieval/evaluate",
                                  json={"dataset": "demo", "surprise": 1}, timeout=60), 422)
    assert [p["field"] for p in body["errors"]] == ["surprise"]
    _problem(requests.get(f"{live_server}/api/v1/nothing-here", timeout=60), 404)
    _problem(requests.delete(f"{api}/knowledge-bases", timeout=60), 405)
    body = _problem(requests.post(f"{api}/knowledge-bases/{demo_kb}/retrieval/datasets", data=b"x",
                                  headers={"Content-Type": "text/plain"}, timeout=60), 415)


def test_uploads_over_the_limit_are_refused_before_reading(live_server, demo_kb, engine):
    before = _stored_counts(engine)
    url = f"{live_server}/api/v1/knowledge-bases/{demo_kb}/retrieval/datasets"
    host, port = live_server.removeprefix("http://").split(":")
    for path, header, status in (("datasets", ("Content-Length", str(60 * 1024 * 1024)), 413),  # none of it sent
                                 ("evaluate", ("Content-Length", str(60 * 1024 * 1024)), 413),
                                 ("evaluate", ("Transfer-Encoding", "chunked"), 411)):
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        conn.putrequest("POST", f"/api/v1/knowledge-bases/{demo_kb}/retrieval/{path}")
        conn.putheader("Content-Type", "application/json")
        conn.putheader(*header)
        conn.endheaders()
        answer = conn.getresponse()
        body = json.loads(answer.read())
        conn.close()
        assert answer.status == status and answer.getheader("content-type").startswith(PROBLEM), (path, body)
        assert ("50 MB" if status == 413 else "Content-Length") in body["detail"]
    big = b"[" + b" " * (50 * 1024 * 1024) + b"]"
    body = _problem(requests.post(url, files={"file": ("big.json", big, "application/json")}, timeout=120), 413)
    assert "over the dataset limit of 50 MB" in body["detail"]
    assert _stored_counts(engine) == before
