"""The hits of the HNSW vector leg shared by the strategies of one process (retrieval/leg_cache.py): the second
strategy of the same leg asks the database nothing for it and stores exactly what it would have found itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rag_pipeline.evaluation import shared_indexes
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.retrieval import search
from rag_pipeline.retrieval.leg_cache import LegCache
from rag_pipeline.retrieval.strategies import load_registry
from rag_pipeline.retrieval.trace import LegHit
from rag_pipeline_tests.eval_helpers import stored_pools

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = load_registry()
def test_a_second_strategy_of_the_same_vector_leg_reuses_its_hits_and_stores_the_same_pools(engine, demo_kb,
                                                                                           monkeypatch):
    dataset = load_dataset(ROOT / "datasets" / "demo.json")
    shared_indexes.clear()
    first = evaluate_dataset(engine, dataset, REGISTRY["hybrid-v1"])  # USE top 10 at ef_search 100: asked
    statements = []
    real = search.retrieval_sql.vector_leg
    monkeypatch.setattr(search.retrieval_sql, "vector_leg", lambda *a, **k: statements.append(1) or real(*a, **k))
    shared = evaluate_dataset(engine, dataset, REGISTRY["vector-v1"])  # the same leg: remembered
    assert statements == [], "vector-v1's leg came from hybrid-v1's hits"
    cache = shared_indexes.leg_cache(first.knowledge_base_id, first.knowledge_base_version)
    assert cache.reused == len(dataset.cases)

    shared_indexes.clear()  # nothing remembered: vector-v1 asks the index itself
    alone = evaluate_dataset(engine, dataset, REGISTRY["vector-v1"])
    assert statements, "without the remembered hits the leg is an SQL statement"
    assert stored_pools(engine, shared.run_id) == stored_pools(engine, alone.run_id)
    assert shared.averages == alone.averages

    shared_indexes.clear()
    evaluate_dataset(engine, dataset, REGISTRY["hybrid-bm25-v1"])  # top 100: another leg, nothing reused
    other = shared_indexes.leg_cache(first.knowledge_base_id, first.knowledge_base_version)
    assert other.reused == 0 and other.asked == len(dataset.cases)


def test_the_cache_forgets_the_least_recently_used_legs_beyond_its_budget():
    cache = LegCache(("kb", "v1"), budget=5)
    vectors = np.eye(4, dtype=np.float32)
    keys = cache.keys(("m", "hnsw", 100, 2), vectors)
    assert len(set(keys)) == 4
    hit = LegHit("c", "d", "n", 1.0)
    cache.keep(keys[:2], [[hit, hit], [hit, hit]])
    assert cache.take(keys[:1]) == [[hit, hit]]  # keys[0] is now the most recent
    cache.keep(keys[2:3], [[hit, hit]])  # 6 hits > 5: the least recent (keys[1]) goes
    assert cache.take(keys[:3]) == [[hit, hit], None, [hit, hit]]
    assert cache.keys(("m", "hnsw", 100, 3), vectors)[0] != keys[0], "another k is another leg"
