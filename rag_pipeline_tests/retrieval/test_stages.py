"""Complete pools and the rerank stage on a real PostgreSQL with the real USE and MiniLM embedders, checked
against direct computations (numpy over the stored vectors, the legs' own scores, a cross-encoder called
directly)."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest
import sqlalchemy as sa

from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.embedding import get_embedder
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.sources import SourceDocument
from rag_pipeline.retrieval import fusion
from rag_pipeline.retrieval.search import RetrievalError, hybrid_search_batch
from rag_pipeline.retrieval.stages import preflight_rerank
from rag_pipeline.retrieval.strategies import Strategy

# the module fixture ingests with MiniLM (torch + model load)
pytestmark = pytest.mark.slow

USE, MINILM = "use-multilingual-v3", "all-minilm-l6-v2"
CORPUS = {
    "cats.md": "Cats are small domesticated carnivorous mammals. A cat purrs when it is content.",
    "dogs.md": "Dogs are loyal companions descended from wolves. A dog barks at strangers.",
    "postgres.md": "PostgreSQL is a relational database. The pgvector extension adds vector similarity search.",
    "mixed.md": "The cat sat on the mat while the dog barked at the mailman.",
    "ocean.md": "Whales and dolphins are marine mammals that breathe air and live in the ocean.",
    "space.md": "A galaxy contains billions of stars bound together by gravity.",
    "sql.md": "Never run DROP TABLE on a production database without a backup.",
    "lions.md": "Lions are large cats living in prides on the African savanna.",
    "wolves.md": "Wolves hunt in packs and howl to keep in touch across long distances.",
    "search.md": "Full-text search ranks documents by the words they share with the query.",
}
QUESTIONS = ["which animal purrs", "dog barks at the mailman", "vector search in a database",
             "marine mammals breathe air", "big cats of Africa", "the", "cats dogs wolves mammals in the database"]
# Small legs so that most pooled chunks are found by one leg only.
FIRST = Strategy(version="t-first", vector_candidate_k=2, keyword_candidate_k=4, keyword_scorer="bm25",
                 vector_weight=0.4, keyword_weight=0.6, normalization="minmax")
ALL = len(CORPUS)


@pytest.fixture(scope="module")
def kb(engine):
    name = f"t-stages-{uuid.uuid4().hex[:8]}"
    docs = [SourceDocument(n, None, t) for n, t in CORPUS.items()]
    ingest_documents(engine, docs, name, text_search="english", chunk_size=None, models=[USE, MINILM])
    return name, chunking.knowledge_base_id(name)


def _search(engine, kb_id, strategy, questions=QUESTIONS):
    with engine.begin() as conn:
        return hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=questions, strategy=strategy)


def _stored_vectors(engine, kb_id, model) -> dict[str, np.ndarray]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT chunk_id, embedding::text AS v FROM chunk_embeddings "
                                    "WHERE knowledge_base_id = :kb AND model = :m"), {"kb": kb_id, "m": model})
        return {str(r.chunk_id): np.array(json.loads(r.v), dtype=float) for r in rows}


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_completed_scores_equal_the_legs_own_scores(engine, kb) -> None:
    _, kb_id = kb
    complete = FIRST.replace(version="t-complete", complete_pool=True)
    plain, done = _search(engine, kb_id, FIRST), _search(engine, kb_id, complete)
    # Each leg alone over the whole KB: every chunk's own leg score.
    vector_all = _search(engine, kb_id, Strategy(version="t-v", vector_candidate_k=ALL, keyword_candidate_k=0,
                                                 vector_weight=1.0, keyword_weight=0.0))
    keyword_all = _search(engine, kb_id, Strategy(version="t-k", vector_candidate_k=0, keyword_candidate_k=ALL,
                                                  keyword_scorer="bm25", vector_weight=0.0, keyword_weight=1.0))
    completed_somewhere = 0
    for p, d, v, k in zip(plain, done, vector_all, keyword_all, strict=True):
        assert {c.chunk_id for c in p.candidates} == {c.chunk_id for c in d.candidates}  # same pool
        own_v = {c.chunk_id: c.vector_score for c in v.candidates}
        own_k = {c.chunk_id: c.keyword_score for c in k.candidates}
        before = {c.chunk_id: c for c in p.candidates}
        for c in d.candidates:
            assert c.vector_score == own_v[c.chunk_id]  # bit for bit: the leg's own SQL expression
            assert c.keyword_score == own_k.get(c.chunk_id, 0.0)  # no shared term: BM25 scores 0
            assert (c.vector_rank, c.keyword_rank) == (before[c.chunk_id].vector_rank, before[c.chunk_id].keyword_rank)
            completed_somewhere += (c.vector_rank is None) + (c.keyword_rank is None)
        # The fusion now sees real scores: recompute it from the completed scores directly.
        vs = np.array([c.vector_score for c in d.candidates])
        ks = np.array([c.keyword_score for c in d.candidates])
        expected = 0.4 * fusion.normalize(vs, "minmax") + 0.6 * fusion.normalize(ks, "minmax")
        assert np.allclose([c.final_score for c in d.candidates], expected, atol=1e-12)
        assert [c.final_score for c in d.candidates] == sorted((c.final_score for c in d.candidates), reverse=True)
    assert completed_somewhere >= 5  # the test exercises completion, in both legs
    assert any(c.vector_rank is None for t in done for c in t.candidates)
    assert any(c.keyword_rank is None for t in done for c in t.candidates)


def _expected_rerank(trace_first, question, vectors, weight, top_n=None):
    """The rerank stage computed directly: numpy cosine over the stored MiniLM vectors, min-max both, mix."""
    q = get_embedder(MINILM).embed([question])[0].astype(float)
    head = trace_first.candidates if top_n is None else trace_first.candidates[:top_n]
    r = np.array([_cos(q, vectors[c.chunk_id]) for c in head])
    f = np.array([c.final_score for c in head])
    final = weight * fusion.normalize(r, "minmax") + (1 - weight) * fusion.normalize(f, "minmax")
    order = sorted(range(len(head)), key=lambda i: (-final[i], i))
    return [head[i].chunk_id for i in order], {head[i].chunk_id: r[i] for i in order}, final


@pytest.mark.parametrize("complete", [False, True])
def test_embedding_rerank_matches_a_direct_computation(engine, kb, complete) -> None:
    _, kb_id = kb
    first = FIRST.replace(version="t-first2", complete_pool=complete)
    rerank = first.replace(version="t-rerank", rerank={"method": "embedding", "model": MINILM, "weight": 0.6})
    firsts, reranked = _search(engine, kb_id, first), _search(engine, kb_id, rerank)
    vectors = _stored_vectors(engine, kb_id, MINILM)
    moved = 0
    for question, f, r in zip(QUESTIONS, firsts, reranked, strict=True):
        order, scores, _ = _expected_rerank(f, question, vectors, 0.6)
        assert [c.chunk_id for c in r.candidates] == order
        assert [c.rank for c in r.candidates] == list(range(1, len(order) + 1))
        for c in r.candidates:
            assert c.rerank_score == pytest.approx(scores[c.chunk_id], abs=1e-6)
        first_rank = {c.chunk_id: c.rank for c in f.candidates}
        assert all(c.first_stage_rank == first_rank[c.chunk_id] for c in r.candidates)
        assert all(c.first_stage_score == next(x.final_score for x in f.candidates if x.chunk_id == c.chunk_id)
                   for c in r.candidates)
        moved += [c.chunk_id for c in f.candidates] != order
    assert moved  # the stage changes some order, so the comparison means something


def test_rerank_top_n_keeps_the_tail_in_first_stage_order(engine, kb) -> None:
    _, kb_id = kb
    rerank = FIRST.replace(version="t-top2", rerank={"method": "embedding", "model": MINILM, "weight": 1.0,
                                                     "top_n": 2})
    firsts, reranked = _search(engine, kb_id, FIRST), _search(engine, kb_id, rerank)
    vectors = _stored_vectors(engine, kb_id, MINILM)
    for question, f, r in zip(QUESTIONS, firsts, reranked, strict=True):
        order, scores, _ = _expected_rerank(f, question, vectors, 1.0, top_n=2)
        assert [c.chunk_id for c in r.candidates[:2]] == order
        assert [c.chunk_id for c in r.candidates[2:]] == [c.chunk_id for c in f.candidates[2:]]
        assert all(c.rerank_score is None for c in r.candidates[2:])
        assert all(c.rerank_score is not None for c in r.candidates[:2])


def test_rerank_model_missing_from_the_kb_fails_before_the_run(engine) -> None:
    name = f"t-stages-use-{uuid.uuid4().hex[:8]}"
    ingest_documents(engine, [SourceDocument("a.md", None, "alpha beta")], name, text_search="english",
                     chunk_size=None, models=[USE])
    strategy = FIRST.replace(version="t-no-minilm", rerank={"method": "embedding", "model": MINILM})
    with engine.connect() as conn:
        kb_row = conn.execute(sa.text("SELECT id, name FROM knowledge_bases WHERE name = :n"), {"n": name}).one()
        with pytest.raises(RetrievalError, match=r"strategy t-no-minilm: field 'rerank.model'.*all-minilm-l6-v2"):
            preflight_rerank(conn, kb_row, strategy)
