"""An imported TREC run over real HTTP (a real ``rag-pipeline serve``): the API's run detail and history and the
console's run, case and comparison pages read it like any run, its external documents by their original ids."""

from __future__ import annotations

import json
import random
from urllib.parse import quote

import pytest
import requests
import sqlalchemy as sa

from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.service import trec
from rag_pipeline_tests.web.conftest import DEMO_DATASET

pytestmark = [pytest.mark.db, pytest.mark.slow]  # the live server (and its Dagster daemon) + an import
BASE = "/admin/retrieval-evaluations"


@pytest.fixture(scope="module")
def imported(engine, demo_kb, tmp_path_factory) -> tuple[str, str]:
    """The demo dataset as ``demo-trec``; a run file ranking, per case, an external document first, then the
    relevant chunks at ranks 2.., then other chunks: (run id, one case id)."""
    folder = tmp_path_factory.mktemp("trec-web")
    path = folder / "demo-trec.json"
    path.write_text(json.dumps({**json.loads(DEMO_DATASET.read_text(encoding="utf-8")), "name": "demo-trec"}),
                    encoding="utf-8")
    dataset = load_dataset(path)
    with engine.connect() as conn:
        chunks = [str(r[0]) for r in conn.execute(sa.text(
            "SELECT c.id FROM document_chunks c JOIN knowledge_bases k ON k.id = c.knowledge_base_id "
            "WHERE k.name = :kb AND c.is_current ORDER BY c.id"), {"kb": demo_kb})]
    rng = random.Random(2)
    lines = []
    for case in dataset.cases:
        ranked = [f"EXT-{case.case_id}", *case.relevant_chunk_ids,
                  *[c for c in rng.sample(chunks, 8) if c not in case.relevant_chunk_ids]]
        lines += [f"{case.case_id} Q0 {d} {r} {100 - r} web\n" for r, d in enumerate(ranked, start=1)]
    run_file = folder / "web.run"
    run_file.write_text("".join(lines), encoding="utf-8")
    result = trec.import_run(engine, run_file, strategy="web-retriever", dataset=str(path))
    return result.run_id, dataset.cases[0].case_id


def _ok(response: requests.Response) -> requests.Response:
    assert response.status_code == 200, (response.url, response.status_code, response.text[:2000])
    assert "Traceback" not in response.text
    return response


def test_the_api_reads_an_imported_run(live_server, demo_kb, imported) -> None:
    run_id, case_id = imported
    detail = _ok(requests.get(f"{live_server}/api/v1/retrieval/evaluations/{run_id}",
                              params={"candidates": "all", "case_id": case_id}, timeout=60)).json()
    assert detail["summary"]["strategy_version"] == "web-retriever"
    assert detail["summary"]["status"] == "succeeded"
    [case] = detail["cases"]
    first = case["candidates"][0]
    assert first["rank"] == 1 and first["document_name"] == f"EXT-{case_id}", "the external id, as written"
    assert {m["reason"] for m in case["miss_reasons"]} == {"hit"}, "relevant at ranks 2.., within k"
    history = _ok(requests.get(f"{live_server}/api/v1/knowledge-bases/{demo_kb}/retrieval/runs",
                               params={"strategy": "web-retriever"}, timeout=60)).json()
    assert [r["run_id"] for r in history["runs"]] == [run_id]


def test_the_console_shows_an_imported_run(live_server, imported) -> None:
    run_id, case_id = imported
    page = _ok(requests.get(f"{live_server}{BASE}/runs/{run_id}", timeout=60)).text
    assert "web-retriever" in page and case_id in page
    case = _ok(requests.get(f"{live_server}{BASE}/runs/{run_id}/case?case_id={quote(case_id)}", timeout=60)).text
    assert f"EXT-{case_id}" in case
