"""Ties at the cut of every leg: exact duplicate chunks (one paragraph in many documents, real USE vectors)
give the same candidate pool through the HNSW index, an exact scan and on every repeat — the chunks with the
smallest ids among those tied at the k-th score, by the rule (score desc, chunk id asc)."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import sqlalchemy as sa

from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.sources import SourceDocument
from rag_pipeline.retrieval import sql as retrieval_sql
from rag_pipeline.retrieval import vector_cut
from rag_pipeline.retrieval.dense_index import DenseIndex
from rag_pipeline.retrieval.search import hybrid_search_batch
from rag_pipeline.retrieval.strategies import load_registry
from rag_pipeline.retrieval.trace import LegHit
from rag_pipeline.storage.engine import hnsw_index_name

USE = "use-multilingual-v3"
FOOTER = "For questions about your order contact support at help desk by email or phone."
DUPLICATES = 20  # more than k + FETCH_MARGIN: the tied rows fill the first fetch and force a second one
OTHERS = {f"topic-{i}.md": text for i, text in enumerate([
    "Lighthouses guide ships along rocky coasts at night.", "Whales are marine mammals that breathe air.",
    "A galaxy holds billions of stars bound by gravity.", "Sourdough bread rises with wild yeast.",
    "Glaciers carve valleys over thousands of years.", "Bees pollinate flowers and make honey.",
    "The violin has four strings tuned in fifths.", "Volcanoes erupt molten rock called lava.",
])}
K = 5
STRATEGY = load_registry()["hybrid-v1"].replace(version="t-ties", vector_candidate_k=K, keyword_candidate_k=K)
QUESTIONS = ["how do I contact support about my order", FOOTER]


@pytest.fixture(scope="module")
def tied_kb(engine):
    name = f"t-ties-{uuid.uuid4().hex[:8]}"
    docs = {f"footer-{i:02d}.md": FOOTER for i in range(DUPLICATES)} | OTHERS
    # one ingestion of < 64 chunks: one encoder batch, in which equal texts get bit-identical vectors
    ingest_documents(engine, [SourceDocument(n, None, t) for n, t in docs.items()], name, text_search="english",
                     chunk_size=None, models=[USE])
    dup_ids = sorted(str(chunking.chunk_id(name, f"footer-{i:02d}.md", chunking.whole_document(FOOTER)[0]))
                     for i in range(DUPLICATES))
    kb_id = chunking.knowledge_base_id(name)
    with engine.connect() as conn:
        distinct = conn.execute(sa.text("SELECT count(DISTINCT embedding::text) FROM chunk_embeddings "
                                        "WHERE chunk_id = ANY(CAST(:ids AS uuid[])) AND model = :m"),
                                {"ids": dup_ids, "m": USE}).scalar()
    assert distinct == 1, "the duplicates must be a true tie (bit-identical vectors)"
    return kb_id, dup_ids


def _pools(conn, kb_id, strategy=STRATEGY):
    traces = hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=QUESTIONS, strategy=strategy)
    return [([c.chunk_id for c in t.candidates],
             sorted((c.vector_rank, c.chunk_id) for c in t.candidates if c.vector_rank is not None),
             sorted((c.keyword_rank, c.chunk_id) for c in t.candidates if c.keyword_rank is not None))
            for t in traces]


def _plan(conn, kb_id) -> str:
    dim = conn.execute(sa.text(retrieval_sql.MODEL_DIMENSION_SQL), {"model": USE}).scalar()
    vector = np.full(dim, 0.1, dtype=np.float32)
    return "\n".join(r[0] for r in conn.execute(sa.text("EXPLAIN " + retrieval_sql.vector_leg_sql(dim)),
                                                {"kb": kb_id, "model": USE, "k": K, "query_vectors": [vector]}))


@pytest.mark.slow  # many repeated searches, index on and off
def test_duplicates_give_one_pool_with_the_index_forced_on_and_off_and_on_every_run(engine, tied_kb, monkeypatch):
    kb_id, dup_ids = tied_kb
    expected_top = dup_ids[:K]  # every duplicate ties: the K smallest chunk ids, ranked in id order
    pools = {}
    with engine.begin() as conn:  # the HNSW index, even for a KB this small (SET LOCAL: this transaction only)
        conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
        conn.execute(sa.text("SET LOCAL enable_sort = off"))
        assert f"Index Scan using {hnsw_index_name(USE, kb_id)}" in _plan(conn, kb_id)
        pools["hnsw"] = _pools(conn, kb_id)
        pools["hnsw ef_search 10"] = _pools(conn, kb_id, STRATEGY.replace(ef_search=10))
        pools["hnsw ef_search 200"] = _pools(conn, kb_id, STRATEGY.replace(ef_search=200))
    with engine.begin() as conn:  # no index scan: the planner's exact sort
        conn.execute(sa.text("SET LOCAL enable_indexscan = off"))
        assert "hnsw" not in _plan(conn, kb_id)
        pools["index off"] = _pools(conn, kb_id)
    with monkeypatch.context() as m, engine.connect() as conn:  # the code's own exact fallback statement
        exact_sql = retrieval_sql.vector_leg_sql
        m.setattr(retrieval_sql, "vector_leg_sql", lambda dim, exact=False: exact_sql(dim, exact=True))
        pools["exact fallback"] = _pools(conn, kb_id)
    for run in range(3):
        with engine.connect() as conn:
            pools[f"default plan, run {run}"] = _pools(conn, kb_id)
    first = pools["hnsw"]
    for question, (_, vector, keyword) in zip(QUESTIONS, first, strict=True):
        assert vector == list(enumerate(expected_top, start=1)), question
        assert keyword == list(enumerate(expected_top, start=1)), question  # equal ts_rank_cd: same rule
    for how, pool in pools.items():
        assert pool == first, how


def _hits(scores: list[float]) -> list[LegHit]:
    return [LegHit(f"c{i:03d}", "d", "doc", s) for i, s in enumerate(scores)]


def test_cut_fetches_again_while_ties_fill_the_fetch_and_falls_back_to_exact_when_the_index_gives_up():
    rows = _hits([0.9] * 30 + [0.5] * 10)  # c000..c029 tied at 0.9, c030..c039 below
    index_order = rows[29::-1] + rows[:29:-1]  # ties in reverse id order, as an index walk may deliver them
    calls = []

    def search(indexes, limit, exact):
        calls.append((len(indexes), limit, exact))
        got = sorted(rows, key=vector_cut.leg_order)[:limit] if exact else index_order[:min(limit, 20)]
        return [list(got) for _ in indexes]  # the index scan gives up after 20 rows

    (top,) = vector_cut.top_k(search, 1, 4, available=lambda: len(rows))
    assert [h.chunk_id for h in top] == ["c000", "c001", "c002", "c003"]
    # fetch 12: all tied -> 24: the index stops at 20 of 40 -> exact 24: all tied -> exact 48: 40 rows, done
    assert calls == [(1, 12, False), (1, 24, False), (1, 24, True), (1, 48, True)]
    assert vector_cut.top_k(search, 2, 0, available=lambda: 0) == [[], []]
    assert not vector_cut.tie_may_continue(_hits([0.9, 0.9, 0.8]), 2, 3)
    assert vector_cut.tie_may_continue(_hits([0.9, 0.9, 0.9]), 2, 3)


def test_the_exact_leg_in_memory_cuts_the_tie_by_chunk_id_like_sql(engine, tied_kb):
    kb_id, dup_ids = tied_kb
    exact = STRATEGY.replace(version="t-ties-exact", vector_search="exact", keyword_candidate_k=0,
                             vector_weight=1.0, keyword_weight=0.0)
    with engine.begin() as conn:
        index = DenseIndex.load(conn, kb_id, USE)
        sql = hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=QUESTIONS, strategy=exact)
        mem = hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=QUESTIONS, strategy=exact, vector_index=index)
    for a, b in zip(sql, mem, strict=True):
        assert [c.chunk_id for c in a.candidates] == [c.chunk_id for c in b.candidates]
    footer = mem[1].candidates
    assert len({c.vector_score for c in footer}) == 1, "the duplicates tie exactly in memory too"
    assert [c.chunk_id for c in footer] == dup_ids[:K], "the smallest ids of the 20 tied duplicates"
