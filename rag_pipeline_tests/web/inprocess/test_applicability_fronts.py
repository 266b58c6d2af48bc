"""The one applicability rule seen through the HTTP front ends (docs/design.md §3.2), on a knowledge base ingested
with the default model only: the API lists a strategy whose rerank stage needs another model as not applicable,
with why, and refuses to queue it (422 naming the strategy and the model, nothing queued); the console neither
pre-ticks nor offers it and shows the reason."""

from __future__ import annotations

import html as html_lib
import re
import uuid

import sqlalchemy as sa

from rag_pipeline_tests.web.inprocess.conftest import DATASET, covers

API = "/api/v1"
RERANK = "hybrid-bm25-rerank-minilm-v1"  # first stage on the default model, rerank stage on all-minilm-l6-v2
RERANK_MODEL = "all-minilm-l6-v2"


def _runs_of(engine, kb: str) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM retrieval_evaluation_runs r JOIN knowledge_bases k "
                                    "ON k.id = r.knowledge_base_id WHERE k.name = :kb"), {"kb": kb}).scalar()


@covers("GET /api/v1/knowledge-bases/{id}", "POST /api/v1/knowledge-bases/{id}/retrieval/evaluate")
def test_api_lists_the_rerank_strategy_as_inapplicable_and_answers_422_naming_it(client, evaluated, engine):
    info = client.get(f"{API}/knowledge-bases/{evaluated['kb']}").json()
    assert info["models"] == ["use-multilingual-v3"]
    assert RERANK not in info["applicable_strategies"] and "hybrid-v1" in info["applicable_strategies"]
    reason = info["inapplicable_strategies"][RERANK]
    assert RERANK in reason and RERANK_MODEL in reason and "rerank stage" in reason, reason
    before = _runs_of(engine, evaluated["kb"])
    url = f"{API}/knowledge-bases/{evaluated['kb']}/retrieval/evaluate"
    refused = client.post(url, json={"dataset": DATASET, "strategy_versions": ["keyword-v1", RERANK]})
    assert refused.status_code == 422, refused.text
    detail = refused.json()["detail"]
    assert RERANK in detail and RERANK_MODEL in detail and "--models all-minilm-l6-v2" in detail, detail
    inline = client.post(url, json={"name": f"apply-{uuid.uuid4().hex[:6]}", "cases": evaluated["cases"],
                                    "strategy_versions": [RERANK]})
    assert inline.status_code == 422 and RERANK in inline.json()["detail"]
    assert _runs_of(engine, evaluated["kb"]) == before, "nothing queued"


@covers("GET /admin/retrieval-evaluations/kb/{kb}/datasets/{dataset}")
def test_console_does_not_pre_tick_the_rerank_strategy_and_says_why(client, evaluated):
    page = client.get(f"/admin/retrieval-evaluations/kb/{evaluated['kb']}/datasets/{DATASET}")
    assert page.status_code == 200
    boxes = {m.group(1): m.group(0) for m in re.finditer(r'<input type="checkbox" name="strategy" value="([^"]+)"'
                                                          r'[^>]*>', page.text)}
    assert RERANK in boxes and "hybrid-v1" in boxes
    assert "checked" not in boxes[RERANK] and "disabled" in boxes[RERANK], boxes[RERANK]
    assert "checked" in boxes["hybrid-v1"] and "disabled" not in boxes["hybrid-v1"]
    label = re.search(rf'<label[^>]*>\s*<input[^>]*value="{RERANK}"[^>]*>.*?</label>', page.text, re.S).group(0)
    text = html_lib.unescape(label)
    assert RERANK_MODEL in text and "rerank stage" in text, text


@covers("GET /admin/retrieval-evaluations/kb/{kb}/labelling")
def test_console_labelling_pools_only_runnable_strategies_and_lists_the_others_with_why(client, evaluated):
    page = client.get(f"/admin/retrieval-evaluations/kb/{evaluated['kb']}/labelling")
    assert page.status_code == 200
    offered = re.findall(r'<input type="checkbox" name="strategy" value="([^"]+)"', page.text)
    assert "hybrid-v1" in offered and RERANK not in offered
    left = html_lib.unescape(re.search(r'not offered \(cannot run on this knowledge base\):(.*?)</p>', page.text,
                                       re.S).group(1))
    assert RERANK in left and f"no {RERANK_MODEL!r} embeddings for the rerank stage" in left, left
