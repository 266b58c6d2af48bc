"""A batch that comes before its run's indexes are ready walks the HNSW index already and hands those rows to the
search: the same traces and miss reasons as a batch that found the indexes ready, with one walk, not two."""

from __future__ import annotations

import dataclasses
import logging
from concurrent.futures import Future
from pathlib import Path

from rag_pipeline.evaluation import evaluate
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.knowledge_base.embedding import get_embedder
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.knowledge_base.question_embeddings import QuestionVectors
from rag_pipeline.retrieval import sql as retrieval_sql
from rag_pipeline.retrieval.strategies import load_registry
from rag_pipeline.storage.snapshot_readers import snapshot_readers

ROOT = Path(__file__).resolve().parents[2]


def test_a_batch_walks_ahead_while_the_indexes_load_and_finds_the_same(engine, demo_kb, monkeypatch):
    strategy = load_registry()["hybrid-bm25-v1"]
    batch = load_dataset(ROOT / "datasets" / "demo.json").cases[:12]
    vectors = QuestionVectors(engine, get_embedder(strategy.embedding_model)).vectors([c.question for c in batch])
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, demo_kb)
    walks: list[int] = []
    walk = retrieval_sql.vector_walk

    def counted(conn, dimension, params):
        walks.append(len(params["query_vectors"].rows))
        return walk(conn, dimension, params)

    monkeypatch.setattr(retrieval_sql, "vector_walk", counted)
    with snapshot_readers(engine, 2) as readers:
        legs = evaluate._prepare_legs(readers, kb, strategy, 2, logging.getLogger("test"))
        assert legs.keyword_index is not None  # the walk takes its chunks' documents from the keyword index
        legs = dataclasses.replace(legs, leg_cache=None)  # each search walks: none is remembered from the last
        ready: Future = Future()
        ready.set_result(legs)
        expected = evaluate._search_batch(readers, kb, strategy, batch, vectors, ready)
        walks_when_ready = list(walks)
        loading: Future = Future()
        ahead = evaluate.walk_ahead

        def walk_then_load(*args):
            rows = ahead(*args)
            assert not loading.done()  # the rows were read while the indexes were still loading
            loading.set_result(legs)
            return rows

        monkeypatch.setattr(evaluate, "walk_ahead", walk_then_load)
        walks.clear()
        got = evaluate._search_batch(readers, kb, strategy, batch, vectors, loading)
    assert walks_when_ready[0] == len(batch)
    assert walks == walks_when_ready, "the rows walked ahead were the first search's: no second walk"
    assert [t.candidates for t in got.traces] == [t.candidates for t in expected.traces]
    assert [t.selected for t in got.traces] == [t.selected for t in expected.traces]
    assert got.reasons == expected.reasons
    assert got.clock.get("vector_leg") > 0
