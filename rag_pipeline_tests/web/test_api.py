"""The API of docs/design.md §6.2 over real HTTP: a real ``rag-pipeline serve``, the real database, a real Dagster
daemon.

One dataset (the demo cases, renamed ``demo-api``) is uploaded and evaluated with two strategies through Dagster;
the tests then read the runs, the detail in every candidates mode, and the comparison, each against what the CLI
prints for the same runs."""

from __future__ import annotations

import json
import time

import pytest
import requests
import sqlalchemy as sa

from rag_pipeline.cli.main import main as cli
from rag_pipeline_tests.web.conftest import DEMO_DATASET

# a `rag-pipeline serve` process and a Dagster daemon on the database, two Dagster evaluations
pytestmark = [pytest.mark.db, pytest.mark.slow]

DATASET = "demo-api"
STRATEGIES = ["keyword-v1", "hybrid-v1"]
TERMINAL = ("succeeded", "failed", "abandoned")


def _cli_json(capsys, *argv: str) -> dict:
    capsys.readouterr()
    code = cli(list(argv))
    out = capsys.readouterr().out
    assert code in (0, 1), out
    return json.loads(out)


@pytest.fixture(scope="module")
def evaluated(live_server, demo_kb):
    """Upload ``demo-api`` (multipart), evaluate it with two strategies, poll until both finished; returns
    (upload result, evaluate response, {strategy: final summary}, progress seen while polling)."""
    data = json.loads(DEMO_DATASET.read_text(encoding="utf-8"))
    data["name"] = DATASET  # a dataset of its own (the console test uploads `demo`)
    up = requests.post(f"{live_server}/api/v1/knowledge-bases/{demo_kb}/retrieval/datasets",
                       files={"file": (f"{DATASET}.json", json.dumps(data, ensure_ascii=False).encode(),
                                       "application/json")}, timeout=60)
    assert up.status_code in (200, 201), up.text
    response = requests.post(f"{live_server}/api/v1/knowledge-bases/{demo_kb}/retrieval/evaluate",
                             json={"dataset": DATASET, "strategy_versions": STRATEGIES}, timeout=60)
    assert response.status_code == 202, response.text
    launched = response.json()
    seen: dict[str, list[tuple[str, int]]] = {s: [] for s in STRATEGIES}
    final = {}
    deadline = time.monotonic() + 900
    while len(final) < len(STRATEGIES):
        for run in launched["runs"]:
            if run["strategy_version"] in final:
                continue
            detail = requests.get(live_server + run["links"]["self"], params={"candidates": "none"}, timeout=60)
            assert detail.status_code == 200, detail.text
            summary = detail.json()["summary"]
            seen[run["strategy_version"]].append((summary["status"], summary["cases_done"]))
            if summary["status"] in TERMINAL:
                final[run["strategy_version"]] = summary
        assert time.monotonic() < deadline, f"runs not finished after 900 s: {seen}"
        time.sleep(1)
    return up.json(), launched, final, seen


def test_healthz_reports_database_and_queue(live_server):
    response = requests.get(live_server + "/healthz", timeout=30)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "ok" and body["database"] == "ok"
    assert body["queue"] == {"daemon_running": True, "message": None}


def test_evaluate_queues_one_dagster_run_per_strategy_and_they_succeed(evaluated, engine):
    uploaded, launched, final, seen = evaluated
    assert uploaded["name"] == DATASET and uploaded["case_count"] >= 30 and uploaded["relevant_ids_not_in_kb"] == 0
    assert launched["dataset"] == DATASET and launched["dataset_version"] == uploaded["version"]
    assert launched["queue"]["daemon_running"] is True
    runs = {r["strategy_version"]: r for r in launched["runs"]}
    assert sorted(runs) == sorted(STRATEGIES)
    for version, run in runs.items():
        assert run["status"] == "queued" and run["partition_key"] == f"{DATASET}|{version}"
        summary = final[version]
        assert summary["status"] == "succeeded", summary["error"]
        assert summary["run_id"] == run["run_id"] and summary["dagster_run_id"] is not None
        assert summary["cases_done"] == summary["case_count"] == uploaded["case_count"]
        assert summary["queued_at"] is not None and summary["queued_at"] <= summary["started_at"]
        progress = [done for _status, done in seen[version]]
        assert progress == sorted(progress), "cases_done never goes back"
        assert {status for status, _ in seen[version]} <= {"queued", "running", "succeeded"}
    assert len({final[v]["dagster_run_id"] for v in runs}) == 1, "one Dagster run for the click"
    with engine.connect() as conn:  # the API's queued rows are the runs: Dagster made no second row
        rows = conn.execute(sa.text(
            "SELECT r.id::text, r.status FROM retrieval_evaluation_runs r JOIN retrieval_evaluation_datasets d "
            "ON d.id = r.dataset_id WHERE d.name = :ds"), {"ds": DATASET}).all()
    assert sorted(r.id for r in rows) == sorted(r["run_id"] for r in launched["runs"])


def test_detail_with_every_candidate_equals_the_cli_show(evaluated, live_server, capsys):
    _, launched, _, _ = evaluated
    run_id = launched["runs"][0]["run_id"]
    api = requests.get(f"{live_server}/api/v1/retrieval/evaluations/{run_id}",
                       params={"candidates": "all", "limit": 1000}, timeout=60).json()
    shown = _cli_json(capsys, "show", run_id, "--candidates", "all")
    assert api["report_version"] == shown["report_version"]
    assert api["summary"] == shown["summary"]
    assert api["cases"] == shown["cases"]
    assert api["page"]["returned"] == api["page"]["total_cases"] == len(shown["cases"])


def test_candidate_modes_case_filter_pagination_and_live_text(evaluated, live_server, engine):
    _, launched, _, _ = evaluated
    url = f"{live_server}/api/v1/retrieval/evaluations/{launched['runs'][1]['run_id'][:8]}"  # a prefix works
    full = requests.get(url, params={"candidates": "all", "limit": 1000}, timeout=60).json()["cases"]
    for mode, keep in (("default", lambda c: c["is_selected"] or c["is_relevant"]),
                       ("selected", lambda c: c["is_selected"]), ("relevant", lambda c: c["is_relevant"]),
                       ("none", lambda c: False)):
        cases = requests.get(url, params={"candidates": mode, "limit": 1000}, timeout=60).json()["cases"]
        assert [c["case_id"] for c in cases] == [c["case_id"] for c in full]
        assert [c["candidates"] for c in cases] == [[x for x in c["candidates"] if keep(x)] for c in full], mode
    assert any(len(c["candidates"]) > sum(x["is_selected"] or x["is_relevant"] for x in c["candidates"])
               for c in full), "the default mode leaves something out"
    page = requests.get(url, params={"offset": 5, "limit": 7}, timeout=60).json()
    assert [c["case_index"] for c in page["cases"]] == list(range(5, 12))
    assert page["page"] == {"offset": 5, "limit": 7, "returned": 7, "total_cases": len(full), "candidates": "default",
                            "include_text": False}
    one = requests.get(url, params={"case_id": full[3]["case_id"], "include_text": "true"}, timeout=60).json()
    assert [c["case_id"] for c in one["cases"]] == [full[3]["case_id"]]
    candidates = one["cases"][0]["candidates"]
    assert candidates and all("content" not in c for c in full[3]["candidates"])
    with engine.connect() as conn:
        texts = dict(conn.execute(sa.text("SELECT id::text, content FROM document_chunks WHERE id = ANY(:ids)"),
                                  {"ids": [c["chunk_id"] for c in candidates]}).all())
    assert [c["content"] for c in candidates] == [texts[c["chunk_id"]] for c in candidates]


def test_run_history_filters_paginates_newest_first(evaluated, live_server, demo_kb):
    _, launched, _, _ = evaluated
    base = f"{live_server}/api/v1/knowledge-bases/{demo_kb}/retrieval/runs"
    everything = requests.get(base, params={"dataset": DATASET}, timeout=60).json()
    ids = [r["run_id"] for r in everything["runs"]]
    assert everything["total"] == len(ids) == 2 and sorted(ids) == sorted(r["run_id"] for r in launched["runs"])
    submitted = [r["queued_at"] for r in everything["runs"]]
    assert submitted == sorted(submitted, reverse=True)
    assert all(r["links"]["self"] == f"/api/v1/retrieval/evaluations/{r['run_id']}" for r in everything["runs"])
    only = requests.get(base, params={"dataset": DATASET, "strategy": "hybrid-v1", "current": "true",
                                      "status": "succeeded"}, timeout=60).json()
    assert [r["strategy_version"] for r in only["runs"]] == ["hybrid-v1"] and only["runs"][0]["is_current"]
    assert requests.get(base, params={"dataset": DATASET, "status": "queued"}, timeout=60).json()["total"] == 0
    first = requests.get(base, params={"dataset": DATASET, "limit": 1}, timeout=60).json()
    second = requests.get(base, params={"dataset": DATASET, "limit": 1, "offset": 1}, timeout=60).json()
    assert first["total"] == 2 and [first["runs"][0]["run_id"], second["runs"][0]["run_id"]] == ids
    by_id = requests.get(f"{live_server}/api/v1/knowledge-bases/"
                         f"{everything['runs'][0]['knowledge_base']['id']}/retrieval/runs",
                         params={"dataset": DATASET}, timeout=60).json()
    assert [r["run_id"] for r in by_id["runs"]] == ids, "the knowledge base by UUID or by name"


def test_comparison_equals_the_cli_compare(evaluated, live_server, capsys):
    api = requests.get(f"{live_server}/api/v1/retrieval/comparisons",
                       params={"dataset": DATASET, "baseline": "hybrid-v1", "resamples": 1000}, timeout=120)
    assert api.status_code == 200, api.text
    cli_out = _cli_json(capsys, "compare", "--dataset", DATASET, "--baseline", "hybrid-v1", "--resamples", "1000",
                        "--format", "json")
    assert api.json() == cli_out
    assert {r["strategy"] for r in api.json()["runs"]} == set(STRATEGIES)


def test_knowledge_bases_and_datasets_listings(evaluated, live_server, demo_kb):
    uploaded = evaluated[0]
    kbs = requests.get(f"{live_server}/api/v1/knowledge-bases", timeout=60).json()["knowledge_bases"]
    demo = next(k for k in kbs if k["name"] == demo_kb)
    assert demo["text_search"] == "mixed" and demo["models"] == ["use-multilingual-v3"]
    assert demo["current_chunks"] > 0 and demo["embeddings"]["use-multilingual-v3"] == demo["current_chunks"]
    assert "hybrid-v1" in demo["applicable_strategies"] and "vector-minilm-v1" in demo["inapplicable_strategies"]
    one = requests.get(f"{live_server}/api/v1/knowledge-bases/{demo['id']}", timeout=60).json()
    assert one["name"] == demo_kb
    datasets = requests.get(f"{live_server}/api/v1/knowledge-bases/{demo_kb}/retrieval/datasets", timeout=60).json()
    mine = next(d for d in datasets["datasets"] if d["name"] == DATASET)
    assert (mine["dataset_id"], mine["version"], mine["case_count"]) == (
        uploaded["dataset_id"], uploaded["version"], uploaded["case_count"])
    assert mine["runs"] >= 2


def test_openapi_documents_the_seed_paths(live_server):
    spec = requests.get(f"{live_server}/openapi.json", timeout=60).json()
    for path in ("/api/v1/knowledge-bases/{id}/retrieval/evaluate", "/api/v1/knowledge-bases/{id}/retrieval/runs",
                 "/api/v1/retrieval/evaluations/{run_id}", "/api/v1/knowledge-bases/{id}/retrieval/datasets",
                 "/api/v1/knowledge-bases", "/api/v1/retrieval/comparisons", "/healthz"):
        assert path in spec["paths"], path
    evaluate = spec["paths"]["/api/v1/knowledge-bases/{id}/retrieval/evaluate"]["post"]
    assert "202" in evaluate["responses"] and "Dagster" in evaluate["description"]
    assert "CaseReport" in spec["components"]["schemas"] and "Problem" in spec["components"]["schemas"]
