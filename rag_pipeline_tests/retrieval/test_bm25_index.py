"""The in-memory keyword legs (retrieval/bm25_index.py) against the exhaustive SQL legs: BM25 (bm25_sql.py) and
ts_rank_cd (retrieval/sql.py, hybrid-v1's scorer).

Identical means: the same top k in the same order (score desc, then chunk id asc — ties included) and the same
scores (bit for bit here; the requirement is 1e-9), the same leg ranks and scores for targets below k, on the
synthetic benchmark KB (Zipf texts, with duplicated documents for exact ties) and on SciFact (``bench_data``).
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.beir import read_beir
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.lifecycle import set_document_state
from rag_pipeline.knowledge_base.sources import SourceDocument
from rag_pipeline.retrieval.bm25_index import Bm25Index, ts_rank_cd_scores
from rag_pipeline.retrieval.search import hybrid_search_batch
from rag_pipeline.retrieval.strategies import Strategy

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import synthetic


def _strategy(k1: float, b: float, k: int, scorer: str = "bm25") -> Strategy:
    return Strategy(version=f"t-idx-{scorer}-{k1}-{b}-{k}", vector_candidate_k=0, keyword_candidate_k=k,
                    keyword_scorer=scorer, bm25_k1=k1, bm25_b=b, vector_weight=0.0, keyword_weight=1.0)


def assert_identical(engine, kb_id, questions: list[str], strategy: Strategy, targets=None) -> int:
    """SQL leg vs index leg for every question; returns how many questions had a tie inside their top k."""
    with engine.connect() as conn:
        index = Bm25Index.load(conn, kb_id, strategy.bm25_k1, strategy.bm25_b)
        sql = hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=questions, strategy=strategy,
                                  targets=targets)
        mem = hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=questions, strategy=strategy,
                                  targets=targets, keyword_index=index)
    ties = 0
    for q, a, b in zip(questions, sql, mem, strict=True):
        assert [c.chunk_id for c in a.candidates] == [c.chunk_id for c in b.candidates], q
        assert [c.keyword_rank for c in a.candidates] == [c.keyword_rank for c in b.candidates], q
        scores_a = np.array([c.keyword_score for c in a.candidates])
        scores_b = np.array([c.keyword_score for c in b.candidates])
        assert np.abs(scores_a - scores_b).max(initial=0.0) <= 1e-9, q
        assert a.candidates == b.candidates, f"not bit-identical: {q}"
        assert a.keyword_targets == b.keyword_targets, q
        ties += len(set(scores_a.tolist())) < len(scores_a)
    return ties


@pytest.fixture(scope="module")
def synthetic_kb(engine):
    name = f"t-idx-{uuid.uuid4().hex[:8]}"
    docs, chunks = synthetic.generate_documents(400, name, seed=3, vocab_size=3_000)
    twins = [SourceDocument(f"twin-{i}.txt", None, docs[i].text) for i in range(3)]  # identical chunks: ties
    ingest_documents(engine, [*docs, *twins], name, text_search="english", chunk_size=synthetic.CHUNK_SIZE,
                     chunk_overlap=synthetic.CHUNK_OVERLAP, models=())
    rng = np.random.default_rng(5)
    questions = []
    for chunk in rng.choice(len(chunks), size=60, replace=False):
        words = chunks[chunk].content.split()
        picked = rng.choice(len(words), size=min(len(words), int(rng.integers(2, 9))), replace=False)
        questions.append("What about " + " ".join(words[i] for i in sorted(picked)) + "?")
    questions += ["the of and", "", "zzzunknownword", "x " * 80 + "policy policy policy"]
    return name, chunking.knowledge_base_id(name), chunks, questions


@pytest.mark.parametrize(("k1", "b", "k"), [(0.9, 0.4, 100), (1.2, 0.75, 10), (0.0, 1.0, 25), (2.0, 0.0, 1)])
def test_index_leg_equals_the_sql_leg_on_the_synthetic_kb(engine, synthetic_kb, k1, b, k):
    _, kb_id, chunks, questions = synthetic_kb
    targets = [[chunks[i].chunk_id, chunks[-i - 1].chunk_id, "not-a-uuid"] for i in range(len(questions))]
    ties = assert_identical(engine, kb_id, questions, _strategy(k1, b, k), targets=targets)
    if k1 == 0.0 or k == 100:  # k1 = 0: a chunk scores the sum of its terms' idf -> many exact ties
        assert ties > 0, "the twins and k1=0 must produce ties inside the top k"


@pytest.mark.parametrize("k", [100, 10, 1])
def test_ts_rank_cd_leg_in_memory_equals_the_sql_leg_on_the_synthetic_kb(engine, synthetic_kb, k):
    """hybrid-v1's scorer: same hits, same order (its scores tie often: a chunk's score depends only on how many
    positions of the question's lexemes it holds), bit-identical float4 scores, same ranks of targets below k."""
    _, kb_id, chunks, questions = synthetic_kb
    targets = [[chunks[i].chunk_id, chunks[-i - 1].chunk_id, "not-a-uuid"] for i in range(len(questions))]
    ties = assert_identical(engine, kb_id, questions, _strategy(0.9, 0.4, k, "ts_rank_cd"), targets=targets)
    if k > 1:
        assert ties > 0, "ts_rank_cd ties inside the top k are the common case"


@pytest.mark.parametrize(("scorer", "k"), [("bm25", 100), ("ts_rank_cd", 10), ("ts_rank_cd", 100)])
def test_keyword_legs_in_memory_equal_their_sql_on_the_demo(engine, demo_kb, scorer, k):
    """The demo knowledge base (Chinese and English, jieba-segmented tsvectors): every demo question, both scorers,
    with its relevant chunks as targets."""
    dataset = load_dataset(Path(__file__).resolve().parents[2] / "datasets" / "demo.json")
    kb_id = chunking.knowledge_base_id(demo_kb)
    questions = [c.question for c in dataset.cases]
    targets = [list(c.relevant_chunk_ids) for c in dataset.cases]
    assert_identical(engine, kb_id, questions, _strategy(0.9, 0.4, k, scorer), targets=targets)


def test_ts_rank_cd_of_a_position_count_equals_postgresql(engine):
    """The closed form against the server's own ts_rank_cd for chunks of 1 to 12,800 words (50 lexemes), with the
    position count read from the tsvector as ``chunk_terms.tf`` is (a tsvector keeps at most 255 positions of a
    lexeme): the double sum replayed in order, then rank / (rank + 1), a float4."""
    words = sorted({1, 2, 3, 7, 10, 99, 255, 256, 257, 1000, 4095, 12_750, 12_800,
                    *np.random.default_rng(11).integers(1, 12_800, 30).tolist()})
    query = " | ".join(f"w{j}" for j in range(50))
    with engine.connect() as conn:
        server = conn.execute(sa.text(
            "SELECT (SELECT sum(array_length(u.positions, 1)) FROM unnest(t.tsv) AS u) AS n, "
            "CAST(ts_rank_cd(t.tsv, CAST(:q AS tsquery), 32) AS float8) AS score "
            "FROM unnest(CAST(:words AS int[])) AS w(n) CROSS JOIN LATERAL (SELECT to_tsvector('simple', "
            "(SELECT string_agg('w' || (i % 50), ' ') FROM generate_series(0, w.n - 1) AS i)) AS tsv) AS t "
            "ORDER BY w.n"), {"q": query, "words": words}).all()
    counts = np.array([int(r.n) for r in server])
    assert counts.min() == 1 and counts.max() == 50 * 255
    assert ts_rank_cd_scores(counts).tolist() == [r.score for r in server]


def test_index_leg_follows_the_searchable_chunks(engine, synthetic_kb):
    """Unpublishing a document changes N, df and the searchable chunks: a reloaded index follows the SQL."""
    name, kb_id, _, questions = synthetic_kb
    strategy = _strategy(0.9, 0.4, 50)
    with engine.begin() as conn:
        set_document_state(conn, name, "twin-0.txt", publication_status="UNPUBLISHED")
    try:
        assert_identical(engine, kb_id, questions, strategy)
        with engine.connect() as conn:
            index = Bm25Index.load(conn, kb_id, 0.9, 0.4)
            hidden = conn.execute(sa.text(
                "SELECT c.id::text FROM document_chunks c JOIN documents d ON d.id = c.document_id "
                "WHERE c.knowledge_base_id = :kb AND d.original_name = 'twin-0.txt'"), {"kb": kb_id}).scalars().all()
        assert hidden and not set(hidden) & set(index.chunk_ids.tolist())
    finally:
        with engine.begin() as conn:
            set_document_state(conn, name, "twin-0.txt", publication_status="PUBLISHED")


def test_index_refuses_another_strategy_or_kb(engine, synthetic_kb):
    _, kb_id, _, questions = synthetic_kb
    with engine.connect() as conn:
        index = Bm25Index.load(conn, kb_id, 0.9, 0.4)
        with pytest.raises(ValueError, match="k1=0.9, b=0.4"):
            hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=questions[:2], strategy=_strategy(1.2, 0.75, 10),
                                keyword_index=index)


@pytest.mark.slow  # ingests SciFact
def test_index_leg_equals_the_sql_leg_on_scifact(engine, bench_data):
    docs, queries, _ = read_beir(bench_data / "scifact")
    name = f"t-idx-scifact-{uuid.uuid4().hex[:6]}"
    ingest_documents(engine, docs, name, text_search="english", chunk_size=None, models=())
    kb_id = chunking.knowledge_base_id(name)
    questions = list(queries.values())
    assert len(questions) == 300
    assert_identical(engine, kb_id, questions, _strategy(0.9, 0.4, 100))  # bm25-v1 / hybrid-bm25-v1's leg
    assert_identical(engine, kb_id, questions, _strategy(0.9, 0.4, 10, "ts_rank_cd"))  # hybrid-v1 / keyword-v1's


@pytest.mark.parametrize("shared_prefix", [False, True])
def test_postings_find_their_chunk_columns_by_uuid(shared_prefix):
    """Postings → matrix columns: the binary search on a uuid's first 8 bytes, and on all 16 when two chunk ids
    share their first 8 (a rare collision, forced here); a posting of a chunk that is not in the list has none."""
    from rag_pipeline.retrieval.bm25_index import _POSTING, _UUID, _columns

    rng = np.random.default_rng(7)
    ids = [rng.bytes(16) for _ in range(500)]
    if shared_prefix:
        ids += [ids[0][:8] + rng.bytes(8), ids[1][:8] + rng.bytes(8)]
    ids = sorted(set(ids))
    keys = np.frombuffer(b"".join(ids), dtype=_UUID)
    absent = [rng.bytes(16) for _ in range(20)] + [ids[3][:8] + bytes(8)]
    wanted = [ids[i] for i in rng.integers(0, len(ids), 300)] + absent
    postings = np.frombuffer(b"".join(w + (1).to_bytes(4, "big") for w in wanted), dtype=_POSTING)
    col, found = _columns(keys, postings)
    expected = [ids.index(w) if w in ids else None for w in wanted]
    assert [int(c) if f else None for c, f in zip(col, found, strict=True)] == expected
    assert found.sum() == 300


@pytest.mark.parametrize("parts", [2, 3, 7])
def test_postings_read_in_lexeme_ranges_on_several_snapshot_readers_give_the_same_index(engine, synthetic_kb, parts):
    """The parallel load (ranges of lexemes on the run's snapshot readers) builds the very matrix of the one-statement
    load: same rows, columns and bit-identical weights, every posting once."""
    from rag_pipeline.retrieval.bm25_index import _lexeme_ranges
    from rag_pipeline.retrieval.bm25_sql import _TERMS_SQL  # moved with the other statements
    from rag_pipeline.storage.snapshot_readers import snapshot_readers

    _, kb_id, _, _ = synthetic_kb
    with engine.connect() as conn:
        whole = Bm25Index.load(conn, kb_id, 0.9, 0.4)
        terms = conn.execute(sa.text(_TERMS_SQL), {"kb": kb_id}).all()
    ranges = _lexeme_ranges(terms, parts)
    assert len(ranges) == parts and ranges[0][0] is None and ranges[-1][1] is None
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # consecutive, no gap, no overlap
    with snapshot_readers(engine, 2) as pool, pool.borrow() as conn:
        split = Bm25Index.load(conn, kb_id, 0.9, 0.4, borrow=pool.borrow, parts=parts)
    # a row's postings come in the order the server scans them (any order: a chunk is once in a row, and a score
    # adds whole rows in lexeme order), so the rows are compared sorted by column
    a, b = split.matrix.copy(), whole.matrix.copy()
    a.sort_indices()
    b.sort_indices()
    assert a.nnz == b.nnz > 0
    assert (a.indptr == b.indptr).all() and (a.indices == b.indices).all() and (a.data == b.data).all()
    assert split.term_row == whole.term_row and (split.chunk_ids == whole.chunk_ids).all()
