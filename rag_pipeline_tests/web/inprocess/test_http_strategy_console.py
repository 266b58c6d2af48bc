"""An ``http`` strategy's run read like any run: the API's run detail carries its retriever's latencies and failed
cases, the console's run page shows p50 / p95 / max next to the metrics (and a screenshot of it is taken when
Chromium is there)."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.retrieval.strategies import strategy_from_mapping
from rag_pipeline_tests.retrieval.retriever_server import RetrieverServer
from rag_pipeline_tests.web.inprocess.conftest import covers

SCREENSHOTS = "http-strategy-console"


@pytest.fixture(scope="module")
def http_run(engine, evaluated, tmp_path_factory) -> tuple[str, str]:
    """The ``inproc`` cases evaluated by a retriever of the test's own (one case slow, one answered garbage)."""
    with engine.connect() as conn:
        chunks = {str(r[0]): r[1] for r in conn.execute(sa.text(
            "SELECT c.id, c.content FROM document_chunks c JOIN knowledge_bases k ON k.id = c.knowledge_base_id "
            "WHERE k.name = :kb AND c.is_current"), {"kb": evaluated["kb"]})}
    path = tmp_path_factory.mktemp("http-console") / "inproc.json"
    path.write_text(json.dumps({"knowledge_base": evaluated["kb"], "name": "inproc", "cases": evaluated["cases"]}),
                    encoding="utf-8")
    dataset = load_dataset(path)
    plan = {"backup-001": ["slow:0.4"], "injection-001": ["garbage"]}
    with RetrieverServer(chunks, plan, delay=0.02) as server:
        strategy = strategy_from_mapping({"version": "inproc-http-v1", "http": {
            "url": server.url, "ids_path": "hits[*].id", "scores_path": "hits[*].score", "retries": 0,
            "request_template": '{"question": "{question}", "case_id": "{case_id}", "k": "{pool_size}"}'}})
        outcome = evaluate_dataset(engine, dataset, strategy)
    return outcome.run_id, evaluated["kb"]


@covers("GET /admin/retrieval-evaluations/runs/{run_id}", "GET /api/v1/retrieval/evaluations/{run_id}",
        "GET /admin/static/{name}")
def test_the_api_and_the_console_show_the_latency(client, http_run, browser, shots) -> None:
    run_id, _ = http_run
    detail = client.get(f"/api/v1/retrieval/evaluations/{run_id}", params={"candidates": "none"})
    assert detail.status_code == 200, detail.text
    retriever = detail.json()["summary"]["counts"]["retriever"]
    assert retriever["failed_cases"] == 1 and retriever["failure_examples"][0].startswith("injection-001: ")
    assert retriever["latency_max_ms"] >= 400 and retriever["latency_p50_ms"] < retriever["latency_max_ms"]
    page = client.get(f"/admin/retrieval-evaluations/runs/{run_id}")
    assert page.status_code == 200 and "inproc-http-v1" in page.text
    assert f"max {retriever['latency_max_ms']:.1f} ms" in page.text and "1 without a ranking" in page.text
    shot = browser.new_page(viewport={"width": 1280, "height": 900})
    css = client.get("/admin/static/console.css").text  # the page as served, its stylesheet inlined
    shot.set_content(page.text.replace('<link rel="stylesheet" href="/admin/static/console.css">',
                                       f"<style>{css}</style>"))
    shot.locator(".grid2").screenshot(path=str(shots / "run-latency.png"))
    shot.close()
