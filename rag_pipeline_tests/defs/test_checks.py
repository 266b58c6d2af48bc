"""Asset checks through real Dagster runs: label integrity on ``evaluation_dataset`` (ERROR blocks the
evaluation, WARN lets it run) and the regression gate on ``strategy_comparison`` over stored runs."""

from __future__ import annotations

import json
import uuid

import dagster as dg
import pytest
import sqlalchemy as sa

from rag_pipeline.defs.checks import label_integrity
from rag_pipeline.defs.comparison import strategy_comparison
from rag_pipeline.defs.evaluation import evaluation_dataset, evaluation_run
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.evaluation.metrics import METRIC_NAMES
from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.sources import SourceDocument

TEXTS = {"vpn.md": "Connect to the office VPN with the client installed on every laptop.",
         "leave.md": "Employees get twenty-five days of paid leave per year."}


@pytest.fixture(scope="module")
def kb(engine):
    name = f"checks-{uuid.uuid4().hex[:8]}"
    ingest_documents(engine, [SourceDocument(n, None, t) for n, t in TEXTS.items()], name, chunk_size=None)
    chunk = {n: str(chunking.chunk_id(name, n, chunking.whole_document(t)[0])) for n, t in TEXTS.items()}
    return name, chunk


def _evaluate(tmp_path, monkeypatch, key: str, kb_name: str, cases: list[dict]):
    monkeypatch.setenv("RAG_DATASETS_DIR", str(tmp_path))
    (tmp_path / f"{key}.json").write_text(json.dumps({"knowledge_base": kb_name, "cases": cases}))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("dataset", [key])
    return dg.materialize([evaluation_dataset, evaluation_run, label_integrity], instance=instance,
                          partition_key=f"{key}|hybrid-v1", resources={"rag_db": RagDatabase()},
                          raise_on_error=False)


def _check(result) -> dg.AssetCheckEvaluation:
    (evaluation,) = result.get_asset_check_evaluations()
    return evaluation


def test_no_valid_label_is_a_blocking_error(kb, tmp_path, monkeypatch):
    kb_name, chunk = kb
    doc_id = str(chunking.document_id(kb_name, "vpn.md"))
    result = _evaluate(tmp_path, monkeypatch, "allbad", kb_name, [
        {"case_id": "vpn", "question": "How do I connect to the VPN?", "relevant_chunk_ids": [doc_id], "k": 2},
        {"case_id": "leave", "question": "How many leave days?", "relevant_chunk_ids": [str(uuid.uuid4())], "k": 2}])
    check = _check(result)
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert check.metadata["cases_without_valid_label"].value == 2
    assert "is_document_id" in check.metadata["invalid"].value and chunk["vpn.md"] in check.metadata["invalid"].value
    materialized = {e.asset_key.path[-1] for e in result.get_asset_materialization_events()}
    assert "evaluation_dataset" in materialized
    assert "evaluation_run_summary" not in materialized, "a blocking ERROR must stop the evaluation"


def test_a_case_without_a_valid_label_warns_and_runs_as_from_the_cli_and_the_api(kb, tmp_path, monkeypatch):
    """One rule (``label_rule``): the dataset the API queues with a ``label_warning`` is not blocked here."""
    kb_name, chunk = kb
    doc_id = str(chunking.document_id(kb_name, "vpn.md"))
    result = _evaluate(tmp_path, monkeypatch, "onebad", kb_name, [
        {"case_id": "vpn", "question": "How do I connect to the VPN?", "relevant_chunk_ids": [doc_id], "k": 2},
        {"case_id": "leave", "question": "How many leave days?", "relevant_chunk_ids": [chunk["leave.md"]], "k": 2}])
    check = _check(result)
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert check.metadata["cases_without_valid_label"].value == 1
    materialized = {e.asset_key.path[-1] for e in result.get_asset_materialization_events()}
    assert "evaluation_run_summary" in materialized


def test_some_invalid_labels_warn_and_the_evaluation_runs(kb, tmp_path, monkeypatch):
    kb_name, chunk = kb
    result = _evaluate(tmp_path, monkeypatch, "somebad", kb_name, [
        {"case_id": "vpn", "question": "How do I connect to the VPN?",
         "relevant_chunk_ids": [chunk["vpn.md"], str(uuid.uuid4())], "k": 2}])
    check = _check(result)
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert check.metadata["status_counts"].value == {"ok": 1, "unknown_id": 1}
    materialized = {e.asset_key.path[-1] for e in result.get_asset_materialization_events()}
    assert "evaluation_run_summary" in materialized


def _store_run(conn, dataset_id, kb_id, version: str, ndcg: list[float]) -> str:
    """A succeeded, current run with the given per-case nDCG (other metrics follow it)."""
    run_id = str(uuid.uuid4())
    conn.execute(sa.text(
        "INSERT INTO retrieval_evaluation_runs (id, dataset_id, knowledge_base_id, strategy_version, params_hash, "
        "strategy_params, status, is_current, case_count, candidate_count, finished_at) VALUES (:id, :ds, :kb, :v, "
        "'x', '{}', 'succeeded', true, :n, :n, now())"), {"id": run_id, "ds": dataset_id, "kb": kb_id, "v": version,
                                                           "n": len(ndcg)})
    for i, value in enumerate(ndcg):
        conn.execute(sa.text(
            f"INSERT INTO retrieval_evaluation_case_results (evaluation_run_id, case_id, case_index, question, k, "
            f"relevant_chunk_ids, retrieved_chunk_ids, {', '.join(METRIC_NAMES)}) VALUES (:id, :c, :i, 'q', 1, "
            f"CAST(:rel_ids AS jsonb), '[]', {', '.join(':v' for _ in METRIC_NAMES)})"),
            {"id": run_id, "c": f"c{i}", "i": i, "v": value, "rel_ids": f'["{uuid.uuid4()}"]'})  # answerable: one id
        # a candidate's document name is its chunk's document's (the view joins it): store both
        chunk_id = uuid.uuid4()
        doc_id = conn.execute(sa.text(
            "INSERT INTO documents (id, knowledge_base_id, original_name, content, content_hash, status, "
            "publication_status, is_deleted) VALUES (gen_random_uuid(), :kb, :doc, 'x', 'h', 'READY', 'PUBLISHED', "
            "false) ON CONFLICT (knowledge_base_id, original_name) DO UPDATE SET updated_at = now() RETURNING id"),
            {"kb": kb_id, "doc": f"{version}-doc-{i}.md"}).scalar_one()
        conn.execute(sa.text(
            "INSERT INTO document_chunks (id, knowledge_base_id, document_id, ordinal, content, content_hash, "
            "char_start, char_end, content_tsvector, token_count, is_current) "
            "VALUES (:c, :kb, :d, 0, 'x', 'h', 0, 1, 'x', 1, true)"), {"c": chunk_id, "kb": kb_id, "d": doc_id})
        conn.execute(sa.text(
            "INSERT INTO retrieval_evaluation_candidates (evaluation_run_id, case_id, chunk_id, document_id, "
            "document_name, rank, final_score, is_relevant, is_selected, strategy_version) VALUES (:id, :c, "
            ":chunk, :d, :doc, 1, :v, :rel, true, :sv)"),
            {"id": run_id, "c": f"c{i}", "chunk": chunk_id, "d": doc_id, "doc": f"{version}-doc-{i}.md", "v": value,
             "rel": value > 0.5, "sv": version})
    return run_id


@pytest.mark.parametrize(("margin", "passes"), [(0.0, False), (0.5, True)])
def test_regression_gate_on_stored_runs(engine, kb, margin, passes):
    kb_name, _ = kb
    key = f"gate-{uuid.uuid4().hex[:6]}"
    with engine.begin() as conn:
        dataset_id = conn.execute(sa.text(
            "INSERT INTO retrieval_evaluation_datasets (id, name, knowledge_base_name, content_hash, case_count, "
            "cases) VALUES (gen_random_uuid(), :n, :kb, :h, 10, '[]') RETURNING id"),
            {"n": key, "kb": kb_name, "h": key}).scalar_one()
        kb_id = chunking.knowledge_base_id(kb_name)
        _store_run(conn, dataset_id, kb_id, "hybrid-v1", [0.9, 0.8, 0.85, 0.7, 0.95, 0.9, 0.75, 0.8, 0.9, 0.85])
        _store_run(conn, dataset_id, kb_id, "keyword-v1", [0.5, 0.4, 0.6, 0.1, 0.55, 0.5, 0.35, 0.4, 0.5, 0.45])
        _store_run(conn, dataset_id, kb_id, "rrf-v1", [0.9, 0.85, 0.8, 0.7, 0.95, 0.9, 0.8, 0.75, 0.9, 0.85])
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("dataset", [key])
    result = dg.materialize([strategy_comparison], instance=instance, partition_key=key,
                            resources={"rag_db": RagDatabase()}, raise_on_error=False,
                            run_config={"ops": {"strategy_comparison": {"config": {"margin": margin}}}})
    (gate,) = result.get_asset_check_evaluations()
    assert gate.passed is passes
    if not passes:
        assert gate.metadata["failing_strategies"].value == ["keyword-v1"]
    (mat,) = result.get_asset_materialization_events()
    meta = mat.materialization.metadata
    assert meta["strategies"].value == 3
    assert "keyword-v1" in meta["significance"].value and "Holm p" in meta["significance"].value
    assert meta["chart"].value.startswith("![strategy comparison](data:image/png;base64,")
    assert "keyword-v1-doc-3.md" in meta["moved_cases"].value and "hybrid-v1-doc-3.md" in meta["moved_cases"].value
    assert meta["ndcg_delta_vs_baseline"].value["keyword-v1"] == pytest.approx(-0.405)
