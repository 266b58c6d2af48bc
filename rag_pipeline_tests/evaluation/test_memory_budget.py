"""An in-memory leg index over the memory budget is not loaded: the leg runs its SQL statement, the log says so,
and the run stores the same pools."""

from __future__ import annotations

import logging
from pathlib import Path

import sqlalchemy as sa

from rag_pipeline.evaluation import memory_budget, shared_indexes
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.retrieval.strategies import load_registry

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = load_registry()
_ROWS = ("SELECT case_index, rank, chunk_id::text, vector_rank, keyword_score, keyword_rank "
         "FROM retrieval_evaluation_candidate_rows WHERE evaluation_run_id = :r ORDER BY case_index, rank")


def _pools(engine, run_id: str) -> list:
    with engine.connect() as conn:
        return conn.execute(sa.text(_ROWS), {"r": run_id}).all()


def test_an_index_over_the_budget_is_not_loaded_and_the_sql_legs_give_the_same_pools(engine, demo_kb, monkeypatch,
                                                                                     caplog):
    dataset = load_dataset(ROOT / "datasets" / "demo.json")
    with engine.connect() as conn:
        kb_id = conn.execute(sa.text("SELECT id FROM knowledge_bases WHERE name = :n"),
                             {"n": dataset.knowledge_base}).scalar_one()
        need = min(memory_budget.keyword_index_bytes(conn, kb_id),
                   memory_budget.vector_index_bytes(conn, kb_id, "use-multilingual-v3"))
        assert need > 0
    shared_indexes.clear()
    in_memory = {v: evaluate_dataset(engine, dataset, REGISTRY[v]) for v in ("hybrid-v1", "vector-exact-v1")}

    shared_indexes.clear()
    loaded = shared_indexes.loads["loaded"]
    monkeypatch.setattr(memory_budget, "budget_bytes", lambda: need - 1)  # one byte short of the smaller index
    with caplog.at_level(logging.WARNING):
        by_sql = {v: evaluate_dataset(engine, dataset, REGISTRY[v]) for v in ("hybrid-v1", "vector-exact-v1")}
    assert shared_indexes.loads["loaded"] == loaded, "no index was loaded"
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "the keyword leg: its in-memory index would take about" in said and "RAG_MEMORY_LEGS_MB" in said
    assert "the exact vector leg" in said
    for version in in_memory:
        assert _pools(engine, by_sql[version].run_id) == _pools(engine, in_memory[version].run_id), version
        assert by_sql[version].averages == in_memory[version].averages, version


def test_the_default_budget_is_a_quarter_of_the_memory_and_the_setting_overrides_it(monkeypatch):
    import psutil

    monkeypatch.delenv("RAG_MEMORY_LEGS_MB", raising=False)
    assert memory_budget.budget_bytes() == psutil.virtual_memory().total // 4
    monkeypatch.setenv("RAG_MEMORY_LEGS_MB", "300")
    assert memory_budget.budget_bytes() == 300 * 2**20
