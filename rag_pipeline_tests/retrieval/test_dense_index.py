"""The in-memory exact vector leg (retrieval/dense_index.py) against the SQL exact statement, on the demo KB.

Equal means: the same candidates in the same order (score desc, then chunk id asc) and scores within 1e-6
(pgvector sums in float32, the index in float64). SciFact is checked by ``bench/dense_bench.py``."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import sqlalchemy as sa

from rag_pipeline.evaluation import shared_indexes
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.embedding import get_embedder
from rag_pipeline.retrieval import dense_index
from rag_pipeline.retrieval.dense_index import DenseIndex
from rag_pipeline.retrieval.search import hybrid_search_batch
from rag_pipeline.retrieval.strategies import load_registry

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-6
REGISTRY = load_registry()


@pytest.fixture(scope="module")
def demo(engine, demo_kb):
    questions = [c.question for c in load_dataset(ROOT / "datasets" / "demo.json").cases]
    questions += ["", "?", "zzz unrelated words " * 20]
    kb_id = chunking.knowledge_base_id(demo_kb)
    model = REGISTRY["vector-exact-v1"].embedding_model
    with engine.connect() as conn:
        index = DenseIndex.load(conn, kb_id, model)
    return kb_id, questions, get_embedder(model).embed(questions), index


def _legs(engine, kb_id, questions, vectors, strategy, index):
    with engine.begin() as conn:
        sql = hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=questions, strategy=strategy,
                                  query_vectors=vectors)
        mem = hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=questions, strategy=strategy,
                                  query_vectors=vectors, vector_index=index)
    return sql, mem


def _assert_equal(sql, mem, questions) -> None:
    for q, a, b in zip(questions, sql, mem, strict=True):
        assert [c.chunk_id for c in a.candidates] == [c.chunk_id for c in b.candidates], q
        assert [c.vector_rank for c in a.candidates] == [c.vector_rank for c in b.candidates], q
        assert [c.keyword_score for c in a.candidates] == [c.keyword_score for c in b.candidates], q
        for field in ("vector_score", "final_score"):
            x = np.array([np.nan if getattr(c, field) is None else getattr(c, field) for c in a.candidates])
            y = np.array([np.nan if getattr(c, field) is None else getattr(c, field) for c in b.candidates])
            assert (np.isnan(x) == np.isnan(y)).all(), (q, field)
            assert np.abs(np.nan_to_num(x) - np.nan_to_num(y)).max(initial=0.0) <= TOLERANCE, (q, field)


def test_the_index_holds_every_searchable_vector_in_chunk_id_order(engine, demo):
    kb_id, _, _, index = demo
    with engine.connect() as conn:
        count = conn.execute(sa.text(
            "SELECT count(*) FROM chunk_embeddings e JOIN document_chunks c ON c.id = e.chunk_id "
            "WHERE e.knowledge_base_id = :kb AND e.model = :m AND c.is_current"), {"kb": kb_id, "m": index.model}
        ).scalar_one()
    assert len(index.chunk_ids) == count > 10
    assert list(index.chunk_ids) == sorted(index.chunk_ids)
    assert index.vectors.dtype == np.float32 and index.vectors.shape[0] == count


def _same_index(index: DenseIndex, whole: DenseIndex, rows=slice(None)) -> None:
    assert index.vectors.flags.c_contiguous and index.vectors.dtype == np.float32
    assert np.array_equal(index.vectors, whole.vectors[rows]) and np.array_equal(index.norms, whole.norms[rows])
    for field in ("chunk_ids", "document_ids", "document_names"):
        assert list(getattr(index, field)) == list(getattr(whole, field)[rows]), field


def test_the_vectors_are_the_stored_ones_bit_for_bit(engine, demo):
    """The binary COPY read against pgvector's own Python adapter reading the column."""
    from pgvector.psycopg import register_vector

    from rag_pipeline.storage.engine import driver_connection

    kb_id, _, _, index = demo
    with engine.connect() as conn:
        raw = driver_connection(conn)
        register_vector(raw)
        stored = dict(raw.execute("SELECT chunk_id::text, embedding FROM chunk_embeddings WHERE knowledge_base_id = "
                                  "%s AND model = %s", (str(kb_id), index.model)).fetchall())
    assert np.array_equal(index.vectors, np.stack([stored[c].to_numpy() for c in index.chunk_ids]))


@pytest.mark.parametrize("block", [1, 7, 4099])
def test_any_split_of_the_copy_data_gives_the_same_index(engine, demo, monkeypatch, block):
    """Blocks of 7 rows, the last one partial; the server's data cut anywhere (inside the header, a row, the
    trailer)."""
    kb_id, _, _, whole = demo
    monkeypatch.setattr(dense_index, "LOAD_ROWS", 7)
    sent = dense_index.retrieval_sql.vector_copy

    def resplit(*args):
        data = b"".join(bytes(d) for d in sent(*args))
        return (data[i:i + block] for i in range(0, len(data), block))

    monkeypatch.setattr(dense_index.retrieval_sql, "vector_copy", resplit)
    with engine.connect() as conn:
        index = DenseIndex.load(conn, kb_id, whole.model)
    assert len(index.vectors) > 7
    _same_index(index, whole)


def test_data_cut_short_is_an_error(engine, demo, monkeypatch):
    kb_id, _, _, whole = demo
    sent = dense_index.retrieval_sql.vector_copy
    monkeypatch.setattr(dense_index.retrieval_sql, "vector_copy",
                        lambda *args: [b"".join(bytes(d) for d in sent(*args))[:-1]])
    with engine.connect() as conn, pytest.raises(dense_index.RetrievalError, match="out of step with its rows"):
        DenseIndex.load(conn, kb_id, whole.model)


def test_chunks_and_vectors_read_apart_keep_only_what_both_have(engine, demo, monkeypatch):
    """On a connection without a snapshot the chunk list and the COPY may disagree: a vector whose chunk is not
    listed is skipped, a listed chunk without a vector is dropped."""
    kb_id, _, _, whole = demo
    listed = dense_index.retrieval_sql.searchable_vector_chunks
    gone = {1, 2, len(whole.chunk_ids) - 1}
    ghost = SimpleNamespace(chunk_id="ffffffff-ffff-4fff-bfff-ffffffffffff", document_id=whole.document_ids[0],
                            document_name="ghost.txt")
    monkeypatch.setattr(dense_index.retrieval_sql, "searchable_vector_chunks",
                        lambda *args: [r for i, r in enumerate(listed(*args)) if i not in gone] + [ghost])
    with engine.connect() as conn:
        index = DenseIndex.load(conn, kb_id, whole.model)
    assert len(index.chunk_ids) == len(whole.chunk_ids) - len(gone) and ghost.chunk_id not in set(index.chunk_ids)
    _same_index(index, whole, [i for i in range(len(whole.chunk_ids)) if i not in gone])


@pytest.mark.parametrize("k", [1, 10, 100, 10_000])
def test_memory_leg_equals_the_sql_exact_statement(engine, demo, k):
    kb_id, questions, vectors, index = demo
    strategy = REGISTRY["vector-exact-v1"].replace(vector_candidate_k=k, final_top_k=k)  # ef_search: unused
    sql, mem = _legs(engine, kb_id, questions, vectors, strategy, index)
    _assert_equal(sql, mem, questions)
    assert all(len(t.candidates) == min(k, len(index.chunk_ids)) for t in mem)


def test_hybrid_with_complete_pools_equals_the_sql_path(engine, demo):
    kb_id, questions, vectors, index = demo
    strategy = REGISTRY["hybrid-bm25-exact-v1"].replace(version="t-dense-complete", vector_candidate_k=5,
                                                        keyword_candidate_k=5, complete_pool=True)
    sql, mem = _legs(engine, kb_id, questions, vectors, strategy, index)
    _assert_equal(sql, mem, questions)
    completed = [c for t in mem for c in t.candidates if c.vector_rank is None]
    assert completed and all(c.vector_score is not None for c in completed), "keyword-only chunks get a score"


def test_an_hnsw_strategy_ignores_the_index_and_a_wrong_index_is_refused(engine, demo):
    kb_id, questions, vectors, index = demo
    sql, mem = _legs(engine, kb_id, questions, vectors, REGISTRY["vector-v1"], index)
    assert [t.candidates for t in sql] == [t.candidates for t in mem]
    other = DenseIndex(index.knowledge_base_id, "all-minilm-l6-v2", index.vectors, index.norms, index.chunk_ids,
                       index.document_ids, index.document_names)
    with engine.begin() as conn, pytest.raises(ValueError, match="not .* and 'use-multilingual-v3'"):
        hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=questions[:1], strategy=REGISTRY["vector-exact-v1"],
                            query_vectors=vectors[:1], vector_index=other)


def test_an_evaluation_gives_the_same_candidates_in_memory_and_by_sql(engine, demo_kb, monkeypatch):
    dataset = load_dataset(ROOT / "datasets" / "demo.json")
    strategy = REGISTRY["hybrid-bm25-exact-v1"]
    runs = {}
    for mode in ("sql", "memory"):
        monkeypatch.setenv("RAG_EXACT_VECTOR_LEG", mode)
        runs[mode] = evaluate_dataset(engine, dataset, strategy)
    with engine.connect() as conn:
        rows = {mode: conn.execute(sa.text(
            "SELECT case_id, rank, chunk_id::text, vector_rank, vector_score, keyword_score FROM "
            "retrieval_evaluation_candidates WHERE evaluation_run_id = :r ORDER BY case_id, rank"),
            {"r": outcome.run_id}).all() for mode, outcome in runs.items()}
    assert len(rows["sql"]) == runs["sql"].candidate_count > 0
    assert [r[:4] for r in rows["sql"]] == [r[:4] for r in rows["memory"]]
    assert [r[5] for r in rows["sql"]] == [r[5] for r in rows["memory"]]
    differences = [abs(a[4] - b[4]) for a, b in zip(rows["sql"], rows["memory"], strict=True) if a[4] is not None]
    assert differences and max(differences) <= TOLERANCE
    for metric, value in runs["sql"].averages.items():
        assert runs["memory"].averages[metric] == pytest.approx(value, abs=1e-12), metric


def test_the_runs_of_one_process_share_the_loaded_indexes(engine, demo_kb, monkeypatch):
    dataset = load_dataset(ROOT / "datasets" / "demo.json")
    shared_indexes.clear()
    before = dict(shared_indexes.loads)
    for version in ("vector-exact-v1", "hybrid-bm25-exact-v1", "bm25-v1"):
        evaluate_dataset(engine, dataset, REGISTRY[version])
    counts = {k: shared_indexes.loads[k] - before[k] for k in before}
    assert counts == {"loaded": 2, "from_file": 0, "reused": 2}, "USE vectors once, BM25 postings (k1 0.9, b 0.4) once"
    monkeypatch.setattr(shared_indexes, "BUDGET_BYTES", 0)  # nothing fits: every run loads its own
    shared_indexes.clear()
    evaluate_dataset(engine, dataset, REGISTRY["vector-exact-v1"])
    evaluate_dataset(engine, dataset, REGISTRY["vector-exact-v1"])
    assert shared_indexes.loads["loaded"] - before["loaded"] == 4


def test_scoring_in_blocks_gives_the_same_leg(engine, demo, monkeypatch):
    kb_id, questions, vectors, index = demo
    rows, columns = np.divmod(np.arange(len(questions) * len(index.chunk_ids)), len(index.chunk_ids))
    whole = index.pair_scores(vectors, rows, columns)
    monkeypatch.setattr(dense_index, "BLOCK_ROWS", 7)  # many blocks, the last one partial
    assert np.array_equal(index.pair_scores(vectors, rows, columns), whole)
    strategy = REGISTRY["vector-exact-v1"].replace(vector_candidate_k=50)
    _assert_equal(*_legs(engine, kb_id, questions, vectors, strategy, index), questions)


def _brute_force_top(index: DenseIndex, questions: np.ndarray, k: int) -> list[list[str]]:
    """Every chunk scored in float64 by one matrix product, the top k by (score desc, chunk id asc): the leg
    without its float32 preselection."""
    q = questions.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        similarity = (q @ index.vectors.T.astype(np.float64)) / np.sqrt(
            (q * q).sum(axis=1)[:, None] * index.norms[None, :])
    scores = np.nan_to_num(1.0 - (1.0 - np.clip(similarity, -1.0, 1.0)), nan=-np.inf)
    columns = np.arange(len(index.chunk_ids))
    return [index.chunk_ids[np.lexsort((columns, -row))[:k]].tolist() for row in scores]


@pytest.mark.parametrize(("n", "dimension", "k"), [(4000, 512, 100), (3000, 64, 10), (40, 8, 100)])
def test_the_float32_preselection_keeps_the_exact_top_k(n, dimension, k):
    """Near ties on purpose: duplicates, scaled copies, copies nudged by one float32 step, a zero vector, a vector
    whose float32 products overflow; a zero question, a question equal to a chunk. The float32 pass must never drop
    a chunk of the exact top k."""
    rng = np.random.default_rng(n)
    vectors = rng.standard_normal((n, dimension)).astype(np.float32)
    vectors[1::3] = vectors[0]
    vectors[2::7] = vectors[5] * 2
    vectors[4::11] = np.nextafter(vectors[0], np.float32(np.inf))
    vectors[min(11, n - 1)] = 0
    far = rng.standard_normal(dimension).astype(np.float32)
    vectors[min(13, n - 1)] = far * np.float32(3e37)  # its float32 dot products overflow: scored exactly, kept
    ids = np.array([f"{i:036d}" for i in range(n)], dtype=object)
    index = DenseIndex("kb", "m", vectors, dense_index._squared_norms(vectors), ids, ids, ids)
    questions = rng.standard_normal((32, dimension)).astype(np.float32)
    questions[3], questions[4], questions[5], questions[6] = 0, vectors[0], vectors[5] + np.float32(1e-6), far
    got = [[h.chunk_id for h in hits] for hits in index.top(questions, k)]
    assert got == _brute_force_top(index, questions, k)
    assert got[6][0] == ids[min(13, n - 1)], "the vector float32 cannot compare is still found"
    assert all(len(hits) == min(k, n) for hits in got)


def test_the_margin_bounds_the_float32_error():
    rng = np.random.default_rng(0)
    for dimension in (8, 384, 512, 1024):
        q = rng.standard_normal((16, dimension)).astype(np.float32)
        v = rng.standard_normal((2000, dimension)).astype(np.float32) * np.float32(1e3)
        exact = (q.astype(np.float64) @ v.T.astype(np.float64)) / np.sqrt(
            np.outer((q.astype(np.float64) ** 2).sum(1), (v.astype(np.float64) ** 2).sum(1)))
        index = DenseIndex("kb", "m", v, dense_index._squared_norms(v), *[np.arange(2000).astype(object)] * 3)
        rough, _ = index._rough_similarity(q)
        assert np.abs(rough - exact).max() < dense_index.float32_margin(dimension) / 2
