"""An in-memory leg index over the memory budget is not loaded: the leg runs its SQL statement, the log (and the
command line) says so, and the run stores the same pools."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import sqlalchemy as sa

from rag_pipeline.evaluation import memory_budget, shared_indexes
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.knowledge_base.versions import content_version
from rag_pipeline.retrieval.strategies import load_registry
from rag_pipeline_tests.eval_helpers import stored_pools

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = load_registry()
def test_an_index_over_the_budget_is_not_loaded_and_the_sql_legs_give_the_same_pools(engine, demo_kb, monkeypatch,
                                                                                     caplog):
    dataset = load_dataset(ROOT / "datasets" / "demo.json")
    with engine.connect() as conn:
        kb_id = conn.execute(sa.text("SELECT id FROM knowledge_bases WHERE name = :n"),
                             {"n": dataset.knowledge_base}).scalar_one()
        need = min(memory_budget.keyword_index_bytes(conn, kb_id),
                   memory_budget.vector_index_bytes(conn, "use-multilingual-v3",
                                                    content_version(conn, kb_id).embeddings["use-multilingual-v3"]))
        assert need > 0
    shared_indexes.clear()
    with caplog.at_level(logging.INFO):
        in_memory = {v: evaluate_dataset(engine, dataset, REGISTRY[v]) for v in ("hybrid-v1", "vector-exact-v1")}
    said = " ".join(r.getMessage() for r in caplog.records)
    for leg in ("the keyword leg", "the exact vector leg"):
        assert f"{leg}: in memory, its index about" in said and "within the budget of" in said, leg
    caplog.clear()

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
        sql, memory = stored_pools(engine, by_sql[version].run_id), stored_pools(engine, in_memory[version].run_id)
        assert len(sql) == len(memory) > 0, version
        exact = (0, 1, 2, 4, 5, 6)  # case, rank, chunk, vector rank, keyword score and rank: bit for bit
        assert [[r[i] for i in exact] for r in sql] == [[r[i] for i in exact] for r in memory], version
        scores = np.array([[r[3] or 0.0, r[7]] for r in sql]) - np.array([[r[3] or 0.0, r[7]] for r in memory])
        assert np.abs(scores).max() <= 1e-6, f"{version}: pgvector sums in float32, the memory leg in float64"
        assert by_sql[version].averages == in_memory[version].averages, version


def test_the_default_budget_is_a_quarter_of_the_memory_and_the_setting_overrides_it(monkeypatch):
    import psutil

    monkeypatch.delenv("RAG_MEMORY_LEGS_MB", raising=False)
    assert memory_budget.budget_bytes() == psutil.virtual_memory().total // 4
    monkeypatch.setenv("RAG_MEMORY_LEGS_MB", "300")
    assert memory_budget.budget_bytes() == 300 * 2**20


def test_the_command_line_prints_the_fallback_warning_on_a_line_of_its_own(engine, demo_kb, monkeypatch, capsys):
    """Not inside the progress bar's line (``\\r``-redrawn), and with the prefix of the command's own warnings."""
    import re

    from rag_pipeline.cli import main

    monkeypatch.setattr(memory_budget, "budget_bytes", lambda: 1)
    shared_indexes.clear()
    assert main(["evaluate", "--knowledge-base", demo_kb, "--dataset", str(ROOT / "datasets" / "demo.json"),
                 "--strategy", "bm25-v1", "--candidates", "none"]) == 0
    lines = re.split(r"[\r\n]", capsys.readouterr().err)
    said = [line for line in lines if line.startswith("rag-pipeline: warning: the keyword leg: its in-memory index")]
    assert len(said) == 1 and said[0].endswith("(the same hits, slower)"), lines
    assert not [line for line in lines if "the keyword leg: its in-memory" in line and line not in said], lines
