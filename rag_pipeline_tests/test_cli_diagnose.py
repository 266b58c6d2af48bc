"""``rag-pipeline check-dataset`` and ``compare`` on a real database with deliberately wrong labels."""

from __future__ import annotations

import json
import uuid

import pytest
import sqlalchemy as sa

from rag_pipeline.cli import main
from rag_pipeline.evaluation.metrics import METRIC_NAMES
from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.lifecycle import set_document_state
from rag_pipeline.knowledge_base.sources import SourceDocument

TEXTS = {"vpn.md": "Connect to the office VPN with the client installed on every laptop.",
         "leave.md": "Employees get twenty-five days of paid leave per year.",
         "draft.md": "A draft about the new expense tool."}


@pytest.fixture(scope="module")
def world(engine):
    kb, other = f"cli-{uuid.uuid4().hex[:8]}", f"cli-other-{uuid.uuid4().hex[:8]}"
    ingest_documents(engine, [SourceDocument(n, None, t) for n, t in TEXTS.items()], kb, chunk_size=None, models=())
    ingest_documents(engine, [SourceDocument("x.md", None, "Other text.")], other, chunk_size=None, models=())
    with engine.begin() as conn:
        set_document_state(conn, kb, "draft.md", publication_status="UNPUBLISHED")
    chunk = {n: str(chunking.chunk_id(kb, n, chunking.whole_document(t)[0])) for n, t in TEXTS.items()}
    chunk["other"] = str(chunking.chunk_id(other, "x.md", chunking.whole_document("Other text.")[0]))
    return kb, other, chunk


def _write(tmp_path, kb, cases, name="wrong"):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"name": name, "knowledge_base": kb, "cases": cases}), encoding="utf-8")
    return path


def _wrong_cases(kb, chunk):
    return [
        {"case_id": "vpn", "question": "How do I connect to the VPN?", "k": 3,
         "relevant_chunk_ids": [str(chunking.document_id(kb, "vpn.md"))]},
        {"case_id": "leave", "question": "How many leave days?", "k": 3,
         "relevant_chunk_ids": [chunk["leave.md"], chunk["other"], chunk["draft.md"]]},
    ]


def test_check_dataset_text_explains_each_wrong_label(world, tmp_path, capsys):
    kb, other, chunk = world
    code = main(["check-dataset", "--dataset", str(_write(tmp_path, kb, _wrong_cases(kb, chunk)))])
    out = capsys.readouterr().out
    assert code == 1
    assert out.startswith("PROBLEMS: 3 of 4 labels are invalid")
    assert "case vpn (no valid label: this case can only score 0)" in out
    assert "is_document_id" in out and chunk["vpn.md"] in out, "the document's chunk ids are suggested"
    assert f"other_knowledge_base\n      chunk of document 'x.md' in knowledge base '{other}'" in out
    assert "document_unpublished" in out and "case leave (some labels invalid)" in out


def test_check_dataset_json_rows(world, tmp_path, capsys):
    kb, _, chunk = world
    code = main(["check-dataset", "--dataset", str(_write(tmp_path, kb, _wrong_cases(kb, chunk))), "--format", "json"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 1
    assert all(set(r) == {"case_id", "chunk_id", "status", "detail"} for r in rows)
    assert [(r["case_id"], r["status"]) for r in rows] == [
        ("vpn", "is_document_id"), ("leave", "ok"), ("leave", "other_knowledge_base"),
        ("leave", "document_unpublished")]


def test_check_dataset_malformed_ids_clean_file_and_unknown_kb(world, tmp_path, capsys):
    kb, _, chunk = world
    bad = _write(tmp_path, kb, [{"case_id": "a", "question": "q", "k": 1,
                                 "relevant_chunk_ids": ["vpn.md#0", chunk["vpn.md"]]}], "malformed")
    assert main(["check-dataset", "--dataset", str(bad), "--format", "json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in rows] == ["not_a_uuid", "ok"]
    good = _write(tmp_path, kb, [{"case_id": "a", "question": "q", "k": 1, "relevant_chunk_ids": [chunk["vpn.md"]]}],
                  "good")
    assert main(["check-dataset", "--dataset", str(good)]) == 0
    assert capsys.readouterr().out.startswith("OK: all 1 labels")
    assert main(["check-dataset", "--dataset", str(good), "--knowledge-base", kb + "-nope"]) == 2
    assert "rag-pipeline: error:" in capsys.readouterr().err


def test_compare_prints_tables_and_fails_the_gate(engine, world, capsys):
    kb, _, _ = world
    name = f"cmp-{uuid.uuid4().hex[:6]}"
    values = {"hybrid-v1": [0.9, 0.8, 0.7, 0.9, 0.8, 0.9, 0.7, 0.8],
              "bm25-v1": [0.2, 0.3, 0.1, 0.2, 0.3, 0.2, 0.1, 0.4]}
    with engine.begin() as conn:
        ds = conn.execute(sa.text(
            "INSERT INTO retrieval_evaluation_datasets (id, name, knowledge_base_name, content_hash, case_count, "
            "cases) VALUES (gen_random_uuid(), :n, :kb, 'h', 8, '[]') RETURNING id"),
            {"n": name, "kb": kb}).scalar_one()
        for version, ndcg in values.items():
            run = conn.execute(sa.text(
                "INSERT INTO retrieval_evaluation_runs (id, dataset_id, knowledge_base_id, strategy_version, "
                "params_hash, strategy_params, status, is_current, case_count, candidate_count, finished_at) VALUES "
                "(gen_random_uuid(), :ds, :kb, :v, 'x', '{}', 'succeeded', true, 8, 0, now()) RETURNING id"),
                {"ds": ds, "kb": chunking.knowledge_base_id(kb), "v": version}).scalar_one()
            for i, v in enumerate(ndcg):
                conn.execute(sa.text(
                    "INSERT INTO retrieval_evaluation_case_results (evaluation_run_id, case_id, case_index, question, "
                    f"k, relevant_chunk_ids, retrieved_chunk_ids, {', '.join(METRIC_NAMES)}) VALUES (:r, :c, :i, 'q', "
                    f"1, CAST(:rel_ids AS jsonb), '[]', {', '.join(':v' for _ in METRIC_NAMES)})"),
                    {"r": run, "c": f"c{i}", "i": i, "v": v, "rel_ids": f'["{uuid.uuid4()}"]'})  # answerable
    assert main(["compare", "--dataset", name]) == 1
    out = capsys.readouterr().out
    assert "hybrid-v1 (baseline)" in out and "Regression gate FAILED: bm25-v1 is worse" in out
    assert "**" not in out and "| " not in out and "---|" not in out, "plain text in a terminal, no markdown"
    assert any(line.startswith("bm25-v1 ") for line in out.splitlines())
    assert main(["compare", "--dataset", name, "--margin", "0.9", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gate"]["passed"] and data["baseline"] == "hybrid-v1"
    # Intentional change: one contract (contracts.comparison.StrategyComparison) for the CLI and the API, so the
    # CLI now prints the API's key order (dataset_version and knowledge_base after baseline; before, they came
    # after moved). The same keys and values: JSON-semantically unchanged. judged_warnings: added last.
    assert list(data) == ["dataset", "baseline", "dataset_version", "knowledge_base", "notes", "runs", "paired",
                          "moved", "stale", "gate", "judged_warnings"]
    ndcg = [p for p in data["paired"] if p["metric"] == "ndcg_at_k"][0]
    assert ndcg["delta"] == pytest.approx(-4.7 / 8) and ndcg["losses"] == 8
    assert main(["compare", "--dataset", name, "--baseline", "rrf-v1"]) == 2
    assert "baseline strategy 'rrf-v1' has no current run" in capsys.readouterr().err
    assert main(["compare", "--dataset", name, "--baseline", "hybird-v1"]) == 2  # a typo, not a missing run
    err = capsys.readouterr().err
    assert "unknown strategy version 'hybird-v1'; did you mean 'hybrid-v1'" in err and "no current run" not in err
