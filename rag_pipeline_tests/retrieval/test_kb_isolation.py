"""A vector leg per knowledge base: KB A's vector search walks an HNSW index holding only A's current vectors, so
ingesting and deleting a KB B of the same size and model (real USE vectors) changes neither A's results nor its
index. ``ef_search`` = k keeps the search approximate, so a shared graph would show."""

from __future__ import annotations

import numpy as np
import sqlalchemy as sa

from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.embedding import get_embedder
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.sources import SourceDocument
from rag_pipeline.retrieval import sql as retrieval_sql
from rag_pipeline.storage.engine import hnsw_index_name

USE = "use-multilingual-v3"
WORDS = ("backup restore archive ledger invoice payroll laptop buddy coffee fridge vacation policy server cluster "
         "index query vector kernel network firewall badge parking lunch travel expense audit release deploy "
         "rollback incident pager metric alert dashboard contract vendor budget roadmap hiring review").split()
N_DOCS, N_QUERIES, K = 200, 40, 10


def _texts(seed: int, n: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=12)) + "." for _ in range(n)]


def _ingest(engine, name: str, seed: int) -> None:
    docs = [SourceDocument(f"d{i:04d}.txt", None, t) for i, t in enumerate(_texts(seed, N_DOCS))]
    ingest_documents(engine, docs, name, text_search="simple", chunk_size=None, models=(USE,))


def _top10(engine, kb_id, vectors, *, exact: bool) -> list[list[str]]:
    with engine.begin() as conn:
        dim = conn.execute(sa.text(retrieval_sql.MODEL_DIMENSION_SQL), {"model": USE}).scalar()
        conn.execute(sa.text(retrieval_sql.VECTOR_SETTINGS_SQL), {"ef_search": K})
        if not exact:  # 200 vectors: the planner would rather sort them all; make it walk the graph
            conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
            conn.execute(sa.text("SET LOCAL enable_sort = off"))
        rows = conn.execute(sa.text(retrieval_sql.vector_leg_sql(dim, exact=exact)),
                            {"kb": kb_id, "model": USE, "k": K, "query_vectors": list(vectors)}).all()
    out: list[list[str]] = [[] for _ in vectors]
    for r in rows:
        out[r.query_index - 1].append(str(r.chunk_id))
    return out


def _recall(approx, exact) -> float:
    return float(np.mean([len(set(a) & set(e)) / len(e) for a, e in zip(approx, exact, strict=True)]))


def _index_state(engine, kb_id) -> tuple:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT pg_relation_size(CAST(:i AS regclass)), "
                                    "pg_get_indexdef(CAST(:i AS regclass))"),
                            {"i": hnsw_index_name(USE, kb_id)}).one()


def test_another_kb_changes_neither_results_nor_index(engine, kb_name):
    kb_a, kb_b = kb_name + "-a", kb_name + "-b"
    _ingest(engine, kb_a, seed=1)
    a_id = chunking.knowledge_base_id(kb_a)
    queries = get_embedder(USE).embed(_texts(99, N_QUERIES))
    exact = _top10(engine, a_id, queries, exact=True)
    before = _top10(engine, a_id, queries, exact=False)
    index_before = _index_state(engine, a_id)
    with engine.begin() as conn:
        conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
        conn.execute(sa.text("SET LOCAL enable_sort = off"))
        plan = "\n".join(r[0] for r in conn.execute(
            sa.text("EXPLAIN " + retrieval_sql.vector_leg_sql(512)),
            {"kb": a_id, "model": USE, "k": K, "query_vectors": list(queries[:1])}))
    assert f"Index Scan using {hnsw_index_name(USE, a_id)}" in plan, plan
    assert str(a_id) in index_before[1] and "knowledge_base_id" in index_before[1]

    _ingest(engine, kb_b, seed=2)  # same size, same model, other texts
    b_id = chunking.knowledge_base_id(kb_b)
    with_b = _top10(engine, a_id, queries, exact=False)
    assert hnsw_index_name(USE, b_id) != hnsw_index_name(USE, a_id)
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM knowledge_bases WHERE id = :kb"), {"kb": b_id})
    after = _top10(engine, a_id, queries, exact=False)

    assert _top10(engine, a_id, queries, exact=True) == exact
    assert with_b == before and after == before, "A's results do not depend on B, live or deleted"
    assert abs(_recall(after, exact) - _recall(before, exact)) <= 0.005
    assert _recall(before, exact) >= 0.8
    assert _index_state(engine, a_id) == index_before, "B's vectors never entered A's index"
