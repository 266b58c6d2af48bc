"""Every API route in-process (``TestClient``, no server, no daemon): status codes and JSON against the service and
the CLI for the same data; an evaluation launched over the API queues its run rows, which the Dagster sensor
(:class:`~rag_pipeline_tests.web.inprocess.conftest.Daemon`) requests as one run and fails once it is cancelled."""

from __future__ import annotations

import json
import uuid

import pytest
import sqlalchemy as sa

from rag_pipeline.cli.main import main as cli
from rag_pipeline.contracts.runs import STAGE_LABELS
from rag_pipeline.service.labelling.chunks import find_chunks
from rag_pipeline_tests.web.inprocess.conftest import DATASET, STRATEGIES, covers

API = "/api/v1"


def _cli_json(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert cli(list(argv)) in (0, 1)
    return json.loads(capsys.readouterr().out)


def _run_row(engine, run_id: str):
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT status, dagster_run_id, error FROM retrieval_evaluation_runs "
                                    "WHERE id = :id"), {"id": run_id}).one()


@covers("GET /healthz")
def test_healthz_reports_database_and_queue(client, daemon):
    daemon.set_daemon(alive=True)
    assert client.get("/healthz").json() == {"status": "ok", "database": "ok",
                                             "queue": {"daemon_running": True, "message": None}}
    daemon.set_daemon(alive=False)
    body = client.get("/healthz").json()
    assert body["status"] == "ok" and body["queue"]["daemon_running"] is False
    assert "no Dagster daemon is running (none has picked up queued runs for 3600 s" in body["queue"]["message"]
    assert "rag-pipeline serve --with-daemon" in body["queue"]["message"]
    daemon.set_daemon(alive=True)


@covers("GET /openapi.json", "GET /docs", "GET /docs/oauth2-redirect", "GET /")
def test_openapi_docs_and_the_root_redirect(client):
    spec = client.get("/openapi.json").json()
    assert {f"{API}/knowledge-bases/{{id}}/retrieval/evaluate", f"{API}/retrieval/evaluations/{{run_id}}",
            "/healthz"} <= set(spec["paths"])
    assert not any(path.startswith("/admin") for path in spec["paths"])
    assert "swagger-ui" in client.get("/docs").text
    assert client.get("/docs/oauth2-redirect").status_code == 200
    root = client.get("/", follow_redirects=False)
    assert (root.status_code, root.headers["location"]) == (307, "/admin/retrieval-evaluations")


@covers("GET /api/v1/knowledge-bases", "GET /api/v1/knowledge-bases/{id}")
def test_knowledge_bases_by_name_and_id(client, evaluated):
    kbs = client.get(f"{API}/knowledge-bases").json()["knowledge_bases"]
    mine = next(k for k in kbs if k["name"] == evaluated["kb"])
    assert mine["current_chunks"] == len(evaluated["chunks"]) and mine["text_search"] == "simple"
    assert set(STRATEGIES) <= set(mine["applicable_strategies"])
    assert client.get(f"{API}/knowledge-bases/{mine['id']}").json() == client.get(
        f"{API}/knowledge-bases/{evaluated['kb']}").json() == mine
    missing = client.get(f"{API}/knowledge-bases/no-such-kb")
    assert missing.status_code == 404 and missing.headers["content-type"].startswith("application/problem+json")


@covers("POST /api/v1/knowledge-bases/{id}/retrieval/datasets", "GET /api/v1/knowledge-bases/{id}/retrieval/datasets")
def test_upload_and_list_datasets(client, evaluated):
    url = f"{API}/knowledge-bases/{evaluated['kb']}/retrieval/datasets"
    name = f"upload-{uuid.uuid4().hex[:6]}"
    first = client.post(url, params={"name": name}, json={"cases": evaluated["cases"]})
    assert first.status_code == 201, first.text
    assert (first.json()["name"], first.json()["case_count"]) == (name, len(evaluated["cases"]))
    again = client.post(url, files={"file": (f"{name}.json", json.dumps(evaluated["cases"]), "application/json")})
    assert again.status_code == 200 and again.json()["version"] == first.json()["version"]
    bad = client.post(url, params={"name": "bad"}, json=[{"case_id": "a", "question": "", "relevant_chunk_ids": []}])
    assert bad.status_code == 422 and {e["field"] for e in bad.json()["errors"]} >= {"question"}
    listed = {d["name"]: d for d in client.get(url).json()["datasets"]}
    assert listed[name]["version"] == first.json()["version"] and listed[name]["runs"] == 0
    assert listed[DATASET]["dataset_id"] == evaluated["dataset_id"] and listed[DATASET]["runs"] == 2
    assert "bad" not in listed


@covers("POST /api/v1/knowledge-bases/{id}/retrieval/evaluate")
def test_evaluate_queues_runs_the_sensor_requests_them_and_fails_them_once_cancelled(client, daemon, evaluated,
                                                                                     engine):
    url = f"{API}/knowledge-bases/{evaluated['kb']}/retrieval/evaluate"
    name = f"launch-{uuid.uuid4().hex[:6]}"
    both = client.post(url, json={"dataset": DATASET, "cases": evaluated["cases"]})
    assert both.status_code == 422 and "not both or neither" in both.json()["detail"]
    # malformed JSON: the position is a character of the body, not a field
    broken = client.post(url, content=b'{"dataset": "x",, }', headers={"content-type": "application/json"})
    assert broken.status_code == 422, broken.text
    [error] = broken.json()["errors"]
    assert error["field"] is None and error["line"].startswith("body (character 16): "), error
    response = client.post(url, json={"name": name, "cases": evaluated["cases"], "strategy_versions": ["keyword-v1"]})
    assert response.status_code == 202, response.text
    body = response.json()
    assert (body["dataset"], body["knowledge_base"], body["queue"]) == (name, evaluated["kb"],
                                                                        {"daemon_running": True, "message": None})
    [run] = body["runs"]
    assert (run["status"], run["strategy_version"], run["partition_key"]) == ("queued", "keyword-v1",
                                                                              f"{name}|keyword-v1")
    assert response.headers["location"] == run["links"]["self"] == f"{API}/retrieval/evaluations/{run['run_id']}"
    assert tuple(_run_row(engine, run["run_id"]))[:2] == ("queued", run["dagster_run_id"])
    detail = client.get(run["links"]["self"]).json()
    assert detail["summary"]["status"] == "queued" and detail["cases"] == [] and detail["queue"]["daemon_running"]

    tick = daemon.tick()
    [request] = [r for r in tick.run_requests if r.run_key == run["dagster_run_id"]]
    assert request.run_config["ops"]["evaluate_click"]["config"] == {"dataset_id": body["dataset_id"],
                                                                     "runs": {"keyword-v1": run["run_id"]}}
    assert name in tick.dynamic_partitions_requests[0].partition_keys
    from rag_pipeline.definitions import defs

    dagster_run = daemon.instance.create_run_for_job(defs.resolve_job_def("evaluate_strategies"),
                                                     run_config=request.run_config, tags=request.tags)
    daemon.instance.report_run_canceled(dagster_run)  # cancelled in the Dagster UI
    daemon.tick()
    row = _run_row(engine, run["run_id"])
    assert row.status == "failed" and f"its Dagster run {dagster_run.run_id} was cancelled" in row.error
    assert client.get(run["links"]["self"]).json()["summary"]["status"] == "failed"


@covers("GET /api/v1/knowledge-bases/{id}/retrieval/runs")
def test_run_history_filters_and_pages(client, evaluated):
    url = f"{API}/knowledge-bases/{evaluated['kb']}/retrieval/runs"
    everything = client.get(url, params={"dataset": DATASET}).json()
    ids = [r["run_id"] for r in everything["runs"]]
    assert everything["total"] == 2 and sorted(ids) == sorted(s["run_id"] for s in evaluated["runs"].values())
    assert everything["queue"] == {"daemon_running": True, "message": None}
    assert all(r["links"]["self"] == f"{API}/retrieval/evaluations/{r['run_id']}" for r in everything["runs"])
    only = client.get(url, params={"dataset": DATASET, "strategy": "keyword-v1", "current": "true",
                                   "status": "succeeded"}).json()
    assert [r["run_id"] for r in only["runs"]] == [evaluated["runs"]["keyword-v1"]["run_id"]]
    second = client.get(url, params={"dataset": DATASET, "limit": 1, "offset": 1}).json()
    assert (second["total"], second["limit"], second["offset"], [r["run_id"] for r in second["runs"]]) == (
        2, 1, 1, ids[1:])
    assert client.get(url, params={"status": "nonsense"}).status_code == 422


@covers("GET /api/v1/retrieval/evaluations/{run_id}")
def test_evaluation_detail_equals_the_cli_show(client, evaluated, capsys):
    run_id = evaluated["runs"]["hybrid-v1"]["run_id"]
    api = client.get(f"{API}/retrieval/evaluations/{run_id[:8]}", params={"candidates": "all"}).json()
    shown = _cli_json(capsys, "show", run_id, "--candidates", "all")
    assert (api["summary"], api["cases"]) == (shown["summary"], shown["cases"])
    assert api["page"] == {"offset": 0, "limit": 100, "returned": len(evaluated["cases"]),
                           "total_cases": len(evaluated["cases"]), "candidates": "all", "include_text": False}
    assert "queue" not in api
    stages = api["summary"]["stages"]  # the run's wall time per stage (docs/evaluating.md, "Time per stage")
    assert list(stages) == [*STAGE_LABELS, "wall_s"] and all(v >= 0 for v in stages.values())
    assert sum(v for k, v in stages.items() if k != "wall_s") == pytest.approx(stages["wall_s"], abs=1e-5)
    one = client.get(f"{API}/retrieval/evaluations/{run_id}",
                     params={"case_id": "monorepo-001", "candidates": "selected", "include_text": "true"}).json()
    [case] = one["cases"]
    assert case["case_id"] == "monorepo-001" and case["candidates"]
    assert all(c["is_selected"] and c["content"] for c in case["candidates"])
    assert client.get(f"{API}/retrieval/evaluations/ffffffff-ffff-4fff-bfff-ffffffffffff").status_code == 404


@covers("GET /api/v1/retrieval/comparisons")
def test_comparison_equals_the_cli_compare(client, evaluated, capsys):
    params = {"dataset": DATASET, "knowledge_base": evaluated["kb"], "baseline": "hybrid-v1", "resamples": 1000}
    api = client.get(f"{API}/retrieval/comparisons", params=params)
    assert api.status_code == 200, api.text
    assert api.json() == _cli_json(capsys, "compare", "--dataset", DATASET, "--knowledge-base", evaluated["kb"],
                                   "--baseline", "hybrid-v1", "--resamples", "1000", "--format", "json")
    assert {r["strategy"] for r in api.json()["runs"]} == set(STRATEGIES)
    assert client.get(f"{API}/retrieval/comparisons", params={"dataset": "no-such-dataset"}).status_code == 404


@covers("GET /api/v1/knowledge-bases/{id}/chunks")
def test_chunks_list_and_search_like_the_service(client, evaluated, engine):
    url = f"{API}/knowledge-bases/{evaluated['kb']}/chunks"
    found = client.get(url, params={"search": "basebackup", "limit": 3}).json()
    assert found == find_chunks(engine, evaluated["kb"], search="basebackup", limit=3).model_dump()
    assert found["chunks"][0]["chunk_id"] == evaluated["chunks"]["backup.md"]
    listing = client.get(url, params={"limit": 100}).json()
    assert sorted(c["chunk_id"] for c in listing["chunks"]) == sorted(evaluated["chunks"].values())
    assert client.get(url, params={"limit": 0}).status_code == 422
