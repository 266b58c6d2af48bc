"""The answer-run routes in-process: an upload is scored and stored like the CLI's file (equal reports), a bad
file is a 422 naming line and field with nothing stored, list / detail / compare answer as the service does, and
a collection from a real local RAG endpoint is scored; a literal header value is refused and never echoed."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from rag_pipeline.service import answers
from rag_pipeline.service.answer_comparison import compare_answer_runs
from rag_pipeline_tests.answers.rag_endpoint_server import RagEndpoint
from rag_pipeline_tests.eval_helpers import write_dataset
from rag_pipeline_tests.web.inprocess.conftest import covers

API = "/api/v1"
NAME = "inproc-answers"


@pytest.fixture(scope="module")
def stored(engine, evaluated, tmp_path_factory) -> dict:
    """Dataset ``inproc-answers`` (reference answers, one unanswerable case) stored by a first scored run."""
    chunks, kb = evaluated["chunks"], evaluated["kb"]
    cases = [
        {"case_id": "backup", "question": "How are backups made?", "k": 3,
         "relevant_chunk_ids": [chunks["backup.md"]], "reference_answers": ["basebackup with continuous archiving"]},
        {"case_id": "coffee", "question": "When is the coffee machine descaled?", "k": 3,
         "relevant_chunk_ids": [chunks["coffee.md"]], "reference_answers": ["every Friday"]},
        {"case_id": "salary", "question": "What is the CEO's salary?", "k": 3, "relevant_chunk_ids": [],
         "answerable": False},
    ]
    folder = tmp_path_factory.mktemp("answer-routes")
    dataset = write_dataset(folder / "x.json", kb, cases, name=NAME)
    lines = [{"case_id": "backup", "answer": "basebackup with continuous archiving",
              "cited_chunk_ids": [chunks["backup.md"]]},
             {"case_id": "coffee", "answer": "on Mondays", "cited_chunk_ids": [chunks["onboarding.md"]]},
             {"case_id": "salary", "answer": "信息不足"}]
    path = folder / "a.jsonl"
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
    first = answers.evaluate_answers(engine, kb, dataset, path, answerer="first")
    return {"kb": kb, "chunks": chunks, "lines": lines, "path": path, "run_a": first.run.run_id}


def _runs(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM answer_runs")).scalar_one()


@covers("POST /api/v1/knowledge-bases/{id}/answer-runs", "GET /api/v1/answer-runs/{run_id}")
def test_an_uploaded_answers_file_is_scored_and_stored_as_the_service_does(client, engine, stored):
    better = [{**stored["lines"][1], "answer": "every Friday", "cited_chunk_ids": [stored["chunks"]["coffee.md"]]}
              if x["case_id"] == "coffee" else x for x in stored["lines"]]
    body = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in better).encode("utf-8")
    resp = client.post(f"{API}/knowledge-bases/{stored['kb']}/answer-runs",
                       files={"file": ("answers.jsonl", body)}, data={"dataset": NAME, "answerer": "better@2"})
    assert resp.status_code == 201, resp.text
    run = resp.json()
    assert resp.headers["location"] == f"/api/v1/answer-runs/{run['run_id']}"
    assert (run["answerer"], run["answerer_version"], run["dataset"]) == ("better", "2", NAME)
    assert run["summary"]["verdicts"]["correct"] == 3 and run["summary"]["coverage"] == 1.0
    detail = client.get(resp.headers["location"])
    assert detail.status_code == 200
    assert detail.json() == answers.get_answer_run(engine, run["run_id"]).model_dump(mode="json")
    json_body = client.post(f"{API}/knowledge-bases/{stored['kb']}/answer-runs",
                            json={"dataset": NAME, "answerer": "json", "answers": stored["lines"]})
    assert json_body.status_code == 201
    assert json_body.json()["summary"]["metrics"] == client.get(
        f"{API}/answer-runs/{stored['run_a']}").json()["summary"]["metrics"]


@covers("POST /api/v1/knowledge-bases/{id}/answer-runs")
def test_an_upload_names_its_convention_and_a_prediction_file_is_read(client, engine, stored):
    url = f"{API}/knowledge-bases/{stored['kb']}/answer-runs"
    default = client.get(f"{API}/answer-runs/{stored['run_a']}").json()["run"]
    assert default["scoring"]["convention"] == default["summary"]["convention"] == "auto"  # a "simple" KB
    predictions = json.dumps({"backup": "basebackup with continuous archiving", "coffee": "on Mondays",
                              "salary": ""}).encode("utf-8")
    resp = client.post(url, files={"file": ("predictions.json", predictions)},
                       data={"dataset": NAME, "convention": "squad"})
    assert resp.status_code == 201, resp.text
    run = resp.json()
    assert run["scoring"]["convention"] == "squad" and run["summary"]["official"]["convention"] == "squad"
    assert run["summary"]["official"]["no_ans_exact"] == 100.0 and run["summary"]["official"]["total"] == 3
    assert run["summary"]["verdicts"]["correct"] == 2  # backup, and "" refuses the unanswerable salary
    as_json = client.post(url, json={"dataset": NAME, "convention": "cmrc", "answers": stored["lines"]}).json()
    assert as_json["summary"]["official"]["convention"] == "cmrc" and as_json["summary"]["official"]["total"] == 2
    before = _runs(engine)
    bad = client.post(url, files={"file": ("a.jsonl", b'{"case_id": "backup"}\n')},
                      data={"dataset": NAME, "convention": "bleu"})
    assert bad.status_code == 422 and "`convention` must be one of squad, cmrc, auto" in bad.text
    assert _runs(engine) == before


@covers("POST /api/v1/knowledge-bases/{id}/answer-runs")
def test_a_bad_answers_file_is_422_with_line_and_field_and_nothing_is_stored(client, engine, stored):
    before = _runs(engine)
    bad = b'{"case_id": "backup", "answer": 3}\n{"case_id": "nope", "answer": "x"}\n'
    resp = client.post(f"{API}/knowledge-bases/{stored['kb']}/answer-runs",
                       files={"file": ("bad.jsonl", bad)}, data={"dataset": NAME})
    assert resp.status_code == 422 and resp.headers["content-type"].startswith("application/problem+json")
    problem = resp.json()
    assert problem["title"] == "Invalid answers file"
    assert [(e["field"], "line 1" in e["line"] or "line 2" in e["line"]) for e in problem["errors"]] == [
        ("answer", True), ("case_id", True)]
    assert "bad.jsonl: line 2" in problem["errors"][1]["line"]
    assert client.post(f"{API}/knowledge-bases/{stored['kb']}/answer-runs",
                       json={"dataset": "../../etc/passwd.json", "answers": stored["lines"]}).status_code == 404
    assert client.post(f"{API}/knowledge-bases/{stored['kb']}/answer-runs", content=b"x",
                       headers={"content-type": "text/plain"}).status_code == 415
    assert _runs(engine) == before


@covers("GET /api/v1/answer-runs", "GET /api/v1/answer-runs/{run_id}")
def test_runs_list_filters_and_detail_filters(client, engine, stored):
    listed = client.get(f"{API}/answer-runs", params={"dataset": NAME, "answerer": "first", "limit": 5})
    assert listed.status_code == 200
    body = listed.json()
    assert body == answers.list_answer_runs(engine, dataset=NAME, answerer="first", limit=5).model_dump(mode="json")
    assert stored["run_a"] in [r["run_id"] for r in body["runs"]]
    assert client.get(f"{API}/answer-runs", params={"limit": 0}).status_code == 422
    wrong = client.get(f"{API}/answer-runs/{stored['run_a'][:8]}", params={"wrong_but_confident": True}).json()
    assert [c["case_id"] for c in wrong["cases"]] == ["coffee"]
    citation = wrong["cases"][0]["citations"][0]
    assert citation["chunk_id"] == stored["chunks"]["onboarding.md"] and citation["is_relevant"] is False
    assert [c["case_id"] for c in client.get(f"{API}/answer-runs/{stored['run_a']}",
                                             params={"verdict": "correct"}).json()["cases"]] == ["backup", "salary"]
    assert client.get(f"{API}/answer-runs/{stored['run_a']}", params={"sort": "nope"}).status_code == 422
    missing = client.get(f"{API}/answer-runs/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404 and "no answer run" in missing.json()["detail"]


@covers("GET /api/v1/answer-runs/compare")
def test_compare_is_the_services_comparison(client, engine, stored):
    other = answers.evaluate_answers(engine, stored["kb"], NAME, stored["path"], answerer="second").run.run_id
    resp = client.get(f"{API}/answer-runs/compare", params={"a": stored["run_a"], "b": other})
    assert resp.status_code == 200
    assert resp.json() == compare_answer_runs(engine, stored["run_a"], other).model_dump(mode="json")
    assert resp.json()["common_cases"] == 3
    assert client.get(f"{API}/answer-runs/compare", params={"a": stored["run_a"], "b": "ffff"}).status_code == 404


@covers("POST /api/v1/datasets/{name}/answers/collect")
def test_collect_from_a_real_endpoint_scores_and_stores_the_run(client, engine, stored, monkeypatch):
    monkeypatch.setenv("ROUTE_TEST_TOKEN", "tok-123")
    monkeypatch.setenv("RAG_COLLECT_ENV", "ROUTE_TEST_*")
    with RagEndpoint() as rag:
        monkeypatch.setenv("RAG_COLLECT_ENDPOINTS", rag.url)
        endpoint = {"url": rag.url, "headers": ["X-Token: env:ROUTE_TEST_TOKEN"], "retries": 0}
        resp = client.post(f"{API}/datasets/{NAME}/answers/collect",
                           json={"knowledge_base": stored["kb"], "endpoint": endpoint})
        assert resp.status_code == 201, resp.text
        body = resp.json()
        assert body["collection"]["answered"] == 3 and body["collection"]["status"] == "succeeded"
        assert body["collection"]["output"] == "" and "tok-123" not in resp.text
        assert resp.headers["location"] == f"/api/v1/answer-runs/{body['run']['run_id']}"
        assert body["summary"]["answered"] == 3
        assert sum(rag.requests.values()) == 3
        before = _runs(engine)
        unstored = client.post(f"{API}/datasets/{NAME}/answers/collect",
                               json={"knowledge_base": stored["kb"], "endpoint": endpoint, "store": False})
        assert unstored.status_code == 200 and unstored.json()["run"] is None
        assert unstored.json()["collection"]["answered"] == 3 and _runs(engine) == before
        asked = sum(rag.requests.values())
        literal = {**endpoint, "headers": ["Authorization: Bearer literal-secret-42"]}
        refused = client.post(f"{API}/datasets/{NAME}/answers/collect",
                              json={"knowledge_base": stored["kb"], "endpoint": literal})
        assert refused.status_code == 422 and "env:NAME" in refused.json()["detail"]
        assert "literal-secret-42" not in refused.text and sum(rag.requests.values()) == asked
    unknown = client.post(f"{API}/datasets/no-such-dataset/answers/collect",
                          json={"knowledge_base": stored["kb"], "endpoint": {"url": rag.url}})
    assert unknown.status_code == 404


def test_the_openapi_schema_lists_the_answer_routes_with_their_models(app):
    paths = app.openapi()["paths"]
    expected = {("/api/v1/knowledge-bases/{id}/answer-runs", "post"): "AnswerRun",
                ("/api/v1/answer-runs", "get"): "AnswerRunList",
                ("/api/v1/answer-runs/{run_id}", "get"): "AnswerReport",
                ("/api/v1/answer-runs/compare", "get"): "AnswerComparison",
                ("/api/v1/datasets/{name}/answers/collect", "post"): "AnswerCollectionResponse"}
    for (path, method), model in expected.items():
        responses = paths[path][method]["responses"]
        ok = responses.get("201") or responses["200"]
        assert ok["content"]["application/json"]["schema"]["$ref"].endswith(f"/{model}"), (path, method)
    assert "multipart/form-data" in paths["/api/v1/knowledge-bases/{id}/answer-runs"]["post"]["requestBody"]["content"]
