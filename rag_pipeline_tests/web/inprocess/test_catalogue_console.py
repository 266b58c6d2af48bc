"""The console on an external knowledge base (a chunk catalogue only): the chunk text "show text" fetches and the
case page of an imported TREC run come from the catalogue."""

from __future__ import annotations

import json
from urllib.parse import quote

from rag_pipeline.knowledge_base import catalogue
from rag_pipeline.service import trec
from rag_pipeline.storage.ids import external_chunk_uuid
from rag_pipeline_tests.web.inprocess.conftest import covers

BASE = "/admin/retrieval-evaluations"


@covers("GET /admin/retrieval-evaluations/chunks/{chunk_id}", "GET /admin/retrieval-evaluations/runs/{run_id}/case",
        "GET /admin/retrieval-evaluations/kb/{kb}")
def test_the_chunk_text_of_an_external_knowledge_base_is_its_catalogue(client, engine, kb_name, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "MED-10", "title": "Statins", "text": "Statins lower cholesterol."}) + "\n"
                      + json.dumps({"_id": "MED-11", "text": "Aspirin thins the blood."}) + "\n", encoding="utf-8")
    catalogue.catalogue(engine, kb_name, corpus)
    med10, med11 = (str(external_chunk_uuid(kb_name, d)[0]) for d in ("MED-10", "MED-11"))
    dataset = tmp_path / "med.json"
    dataset.write_text(json.dumps({"name": "med", "knowledge_base": kb_name, "cases": [
        {"case_id": "q1", "question": "What lowers cholesterol?", "k": 1, "relevant_chunk_ids": [med10]}]}),
        encoding="utf-8")
    run_file = tmp_path / "med.run"
    run_file.write_text("q1 Q0 MED-11 1 2.0 t\nq1 Q0 MED-10 2 1.0 t\n", encoding="utf-8")
    run = trec.import_run(engine, run_file, strategy="med-retriever", dataset=str(dataset))

    body = client.get(f"{BASE}/chunks/{med10}").json()
    assert (body["chunk_id"], body["document_name"], body["content"]) == (
        med10, "MED-10", "Statins\n\nStatins lower cholesterol.")
    assert client.get(f"{BASE}/chunks/{med11}").json()["content"] == "Aspirin thins the blood."
    page = client.get(f"{BASE}/runs/{run.run_id}/case?case_id={quote('q1')}")
    assert page.status_code == 200 and "MED-10" in page.text and "MED-11" in page.text
    kb_page = client.get(f"{BASE}/kb/{quote(kb_name)}")
    assert kb_page.status_code == 200
    assert "2 chunks of your system's documents" in kb_page.text and "kind external" in kb_page.text
    assert "trec import-run" in kb_page.text and "no built-in strategy" in kb_page.text
    assert "tokens per chunk" not in kb_page.text, "an external knowledge base has no documents or chunks of ours"
