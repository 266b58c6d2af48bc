"""The keyword leg: BM25 in PostgreSQL against two independent implementations; Chinese text search.

BM25 is compared given the same tokens.

The tokens are read back from Postgres (the lexemes and positions of each chunk's tsvector, the lexemes of
``to_tsvector`` for the question), so the comparison tests the scoring, not the tokenizer:

- ``rank_bm25.BM25Okapi`` with Lucene's idf ``ln(1 + (N - df + 0.5) / (df + 0.5))`` (its own idf has an
  epsilon floor instead): same formula including ``(k1 + 1)``, float64 → scores within 1e-6;
- ``bm25s`` ``method="lucene"`` (float64): Lucene drops the constant ``(k1 + 1)``, so ours / (k1 + 1).
"""

from __future__ import annotations

import math
import uuid

import bm25s
import numpy as np
import pytest
import sqlalchemy as sa
from rank_bm25 import BM25Okapi

from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.sources import SourceDocument
from rag_pipeline.retrieval.search import hybrid_search_batch
from rag_pipeline.retrieval.strategies import Strategy
from rag_pipeline_tests.eval_helpers import hybrid_search_with_trace

WORDS = ("cell protein gene expression cancer tumour immune response virus infection vaccine dose trial "
         "patient mouse model brain neuron signal pathway receptor binding drug therapy risk heart blood "
         "pressure diabetes insulin glucose liver kidney lung bone muscle age sex diet exercise sleep").split()
QUESTIONS = [
    "protein binding receptor", "cancer cancer therapy risk", "vaccine trial dose in patients",
    "brain neuron signal pathway", "blood pressure and heart risk", "glucose insulin diabetes liver",
    "immune response to virus infection", "sleep and exercise", "gene expression in mouse model",
    "kidney", "unseenword totally absent",
]


def _corpus(n: int = 60, seed: int = 7) -> dict[str, str]:
    """Deterministic pseudo-abstracts of varied length with repeated words (tf > 1) and shared vocabulary."""
    rng = np.random.default_rng(seed)
    docs = {}
    for i in range(n):
        length = int(rng.integers(5, 60))
        weights = rng.dirichlet(np.full(len(WORDS), 0.3))
        docs[f"doc-{i:03d}"] = " ".join(rng.choice(WORDS, size=length, p=weights)) + "."
    return docs


def _strategy(k1: float = 0.9, b: float = 0.4, k: int = 10) -> Strategy:
    return Strategy(version=f"t-bm25-{k1}-{b}", vector_candidate_k=0, keyword_candidate_k=k, keyword_scorer="bm25",
                    bm25_k1=k1, bm25_b=b, vector_weight=0.0, keyword_weight=1.0)


class LuceneIdfBM25(BM25Okapi):
    """rank_bm25's Okapi scoring with Lucene's (non-negative) idf."""

    def _calc_idf(self, nd):
        for word, freq in nd.items():
            self.idf[word] = math.log(1 + (self.corpus_size - freq + 0.5) / (freq + 0.5))


@pytest.fixture(scope="module")
def corpus_kb(engine):
    name = f"t-bm25-{uuid.uuid4().hex[:8]}"
    docs = _corpus()
    ingest_documents(engine, [SourceDocument(n, None, t) for n, t in docs.items()], name,
                     text_search="english", chunk_size=None, models=[])
    kb_id = chunking.knowledge_base_id(name)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT c.id::text AS chunk_id, t.lexeme, coalesce(array_length(t.positions, 1), 1) AS tf "
            "FROM document_chunks c, unnest(c.content_tsvector) t WHERE c.knowledge_base_id = :kb ORDER BY 1, 2"
        ), {"kb": kb_id}).all()
    tokens: dict[str, list[str]] = {}
    for row in rows:
        tokens.setdefault(row.chunk_id, []).extend([row.lexeme] * row.tf)
    assert len(tokens) == len(docs) and max(len(t) for t in tokens.values()) > 2 * min(len(t) for t in tokens.values())
    return kb_id, tokens


def _query_tokens(engine, question: str) -> list[str]:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT tsvector_to_array(to_tsvector('english', :q))"), {"q": question}).scalar()


def _top10(ids: list[str], scores: np.ndarray) -> list[tuple[str, float]]:
    ranked = sorted(((i, float(s)) for i, s in zip(ids, scores) if s > 0), key=lambda t: (-t[1], t[0]))
    return ranked[:10]


@pytest.mark.parametrize(("k1", "b"), [(0.9, 0.4), (1.2, 0.75), (1.5, 0.0), (2.0, 1.0)])
def test_bm25_matches_rank_bm25_and_bm25s(engine, corpus_kb, k1, b):
    kb_id, tokens = corpus_kb
    ids = list(tokens)
    okapi = LuceneIdfBM25([tokens[i] for i in ids], k1=k1, b=b)
    lucene = bm25s.BM25(method="lucene", k1=k1, b=b, dtype="float64")
    lucene.index([tokens[i] for i in ids], show_progress=False)
    with engine.connect() as conn:
        traces = hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=QUESTIONS, strategy=_strategy(k1, b))
    compared = 0
    for question, trace in zip(QUESTIONS, traces):
        query = _query_tokens(engine, question)  # deduplicated lexemes, as the SQL uses them
        ours = [(c.chunk_id, c.keyword_score) for c in trace.candidates]
        expected = _top10(ids, okapi.get_scores(query))
        assert [i for i, _ in ours] == [i for i, _ in expected], question
        for (_, got), (_, want) in zip(ours, expected):
            assert got == pytest.approx(want, abs=1e-6)
        known = [t for t in query if t in lucene.vocab_dict]
        if known:
            scaled = _top10(ids, lucene.get_scores(known) * (k1 + 1))
            assert [i for i, _ in ours] == [i for i, _ in scaled], question
            for (_, got), (_, want) in zip(ours, scaled):
                assert got == pytest.approx(want, abs=1e-6)
        compared += len(ours)
        assert [c.keyword_rank for c in trace.candidates] == list(range(1, len(ours) + 1))
    assert compared > 50
    assert traces[-1].candidates == []  # no known lexeme -> no keyword candidates


def test_bm25_statistics_are_those_of_the_current_chunks(engine, corpus_kb):
    kb_id, tokens = corpus_kb
    with engine.connect() as conn:
        kb = conn.execute(sa.text("SELECT chunk_count, avg_chunk_length FROM knowledge_bases WHERE id = :kb"),
                          {"kb": kb_id}).one()
        df = dict(conn.execute(sa.text("SELECT lexeme, doc_freq FROM knowledge_base_term_stats WHERE "
                                       "knowledge_base_id = :kb"), {"kb": kb_id}).all())
    assert kb.chunk_count == len(tokens)
    assert kb.avg_chunk_length == pytest.approx(sum(map(len, tokens.values())) / len(tokens), rel=1e-12)
    expected_df: dict[str, int] = {}
    for toks in tokens.values():
        for lexeme in set(toks):
            expected_df[lexeme] = expected_df.get(lexeme, 0) + 1
    assert df == expected_df


def test_repeated_query_words_count_once(engine, corpus_kb):
    kb_id, _ = corpus_kb
    with engine.connect() as conn:
        once, thrice = hybrid_search_batch(conn, knowledge_base_id=kb_id,
                                           queries=["cancer risk", "cancer cancer risk risk risk"],
                                           strategy=_strategy())
    assert once.candidates and [(c.chunk_id, c.keyword_score) for c in once.candidates] == [
        (c.chunk_id, c.keyword_score) for c in thrice.candidates]


def test_bm25_single_equals_batch_and_respects_k(engine, corpus_kb):
    kb_id, _ = corpus_kb
    strategy = _strategy(k=5)
    with engine.connect() as conn:
        batch = hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=QUESTIONS, strategy=strategy,
                                    limits=[3] * len(QUESTIONS))
        singles = [hybrid_search_with_trace(conn, knowledge_base_id=kb_id, query=q, strategy=strategy, limit=3)
                   for q in QUESTIONS]
    assert batch == singles
    assert all(len(t.candidates) <= 5 and len(t.selected) <= 3 for t in batch)
    assert any(len(t.candidates) == 5 for t in batch)


CHINESE = {
    "library.md": "我们今天在图书馆学习机器学习的基础知识。",
    "weather.md": "明天的天气预报说会下大雨，请记得带伞。",
    "food.md": "这家餐厅的北京烤鸭非常好吃。",
}


def _zh_kb(engine, mode: str):
    name = f"t-zh-{mode}-{uuid.uuid4().hex[:8]}"
    ingest_documents(engine, [SourceDocument(n, None, t) for n, t in CHINESE.items()], name, text_search=mode,
                     chunk_size=None, models=[])
    return chunking.knowledge_base_id(name)


def _search(engine, kb_id, question, strategy):
    with engine.connect() as conn:
        return hybrid_search_with_trace(conn, knowledge_base_id=kb_id, query=question, strategy=strategy)


def test_chinese_keyword_search_finds_a_word_inside_an_unsegmented_sentence(engine):
    chinese, simple = _zh_kb(engine, "chinese"), _zh_kb(engine, "simple")
    for scorer in ("ts_rank_cd", "bm25"):
        strategy = _strategy().replace(keyword_scorer=scorer)
        found = _search(engine, chinese, "图书馆", strategy)
        assert [c.document_name for c in found.candidates] == ["library.md"]
        assert _search(engine, chinese, "天气预报怎么样", strategy).candidates[0].document_name == "weather.md"
        # Postgres 'simple' keeps the whole sentence as one token: the word inside is not found.
        assert _search(engine, simple, "图书馆", strategy).candidates == []


def test_bm25_plan_looks_up_postings_per_term_on_a_fresh_kb(engine):
    """Right after ingestion (no ANALYZE yet) the postings are still read per query term by primary key."""
    from rag_pipeline.retrieval.bm25_sql import BM25_LEG_SQL

    kb_id = _zh_kb(engine, "simple")
    with engine.connect() as conn:
        plan = "\n".join(r[0] for r in conn.execute(sa.text("EXPLAIN " + BM25_LEG_SQL), {
            "kb": kb_id, "cfg": "simple", "k": 10, "k1": 0.9, "b": 0.4, "query_texts": ["a b", "c"]}))
    assert "Index Scan using chunk_terms_pkey on chunk_terms" in plan and "lexeme = qt.lexeme" in plan, plan
