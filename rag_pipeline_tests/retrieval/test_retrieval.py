"""Hybrid retrieval on a real PostgreSQL + pgvector with the real USE embedder (and MiniLM once).

Chinese keyword search and BM25 scoring are tested in ``test_bm25.py``. The ``engine`` fixture comes from
``rag_pipeline_tests/conftest.py`` (a fresh embedded server per session).
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import sqlalchemy as sa

from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.embedding import get_embedder
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.lifecycle import set_document_state
from rag_pipeline.knowledge_base.sources import SourceDocument
from rag_pipeline.retrieval import sql as retrieval_sql
from rag_pipeline.retrieval.bm25_index import Bm25Index
from rag_pipeline.retrieval.search import (
    LegHit,
    RetrievalError,
    fuse_pool,
    hybrid_search_batch,
)
from rag_pipeline.retrieval.strategies import Strategy, load_registry
from rag_pipeline.retrieval.strategy_store import StrategyConflictError, register_strategy
from rag_pipeline.storage.engine import driver_connection, hnsw_index_name
from rag_pipeline.storage.vector_params import VectorArray
from rag_pipeline_tests.eval_helpers import hybrid_search_with_trace

USE = "use-multilingual-v3"
REGISTRY = load_registry()
HYBRID_V1 = REGISTRY["hybrid-v1"]
WIDE = Strategy(version="t-wide", vector_candidate_k=50, keyword_candidate_k=50)
WIDE_BM25 = WIDE.replace(version="t-wide-bm25", keyword_scorer="bm25")
KEYWORD = Strategy(version="t-keyword", vector_candidate_k=0, keyword_candidate_k=50,
                   vector_weight=0.0, keyword_weight=1.0)

CORPUS = {
    "cats.md": "Cats are small domesticated carnivorous mammals. A cat purrs when it is content.",
    "dogs.md": "Dogs are loyal companions descended from wolves. A dog barks at strangers.",
    "postgres.md": "PostgreSQL is a relational database. The pgvector extension adds vector similarity search.",
    "mixed.md": "The cat sat on the mat while the dog barked at the mailman.",
    "ocean.md": "Whales and dolphins are marine mammals that breathe air and live in the ocean.",
    "space.md": "A galaxy contains billions of stars bound together by gravity.",
    "sql.md": "Never run DROP TABLE on a production database without a backup.",
    "twin-a.md": "Identical twin paragraph about lighthouses on rocky coasts.",
    "twin-b.md": "Identical twin paragraph about lighthouses on rocky coasts.",
}
QUESTIONS = ["which animal purrs", "dog barks", "vector search in a database", "marine mammals",
             "lighthouse coast", "stars and gravity", "the"]


def _ingest(engine, name, texts: dict[str, str], **kwargs):
    docs = [SourceDocument(n, None, t) for n, t in texts.items()]
    kwargs.setdefault("text_search", "english")
    kwargs.setdefault("chunk_size", None)
    kwargs.setdefault("models", [USE])
    ingest_documents(engine, docs, name, **kwargs)
    return chunking.knowledge_base_id(name)


def _chunk(kb_name: str, doc: str, text: str) -> str:
    (piece,) = chunking.whole_document(text)
    return str(chunking.chunk_id(kb_name, doc, piece))


@pytest.fixture(scope="module")
def kb(engine):
    name = f"t-retrieval-{uuid.uuid4().hex[:8]}"
    kb_id = _ingest(engine, name, CORPUS)
    # The encoder's output for a text depends on its batch in the last float bits (~1e-7): give the
    # twin documents bit-identical vectors so they are a true tie in both legs.
    with engine.begin() as conn:
        conn.execute(sa.text(
            "UPDATE chunk_embeddings SET embedding = (SELECT embedding FROM chunk_embeddings "
            "WHERE chunk_id = :a AND model = :m) WHERE chunk_id = :b AND model = :m"
        ), {"a": _chunk(name, "twin-a.md", CORPUS["twin-a.md"]), "b": _chunk(name, "twin-b.md", CORPUS["twin-b.md"]),
            "m": USE})
    return name, kb_id


def _search(engine, kb_id, query, strategy, **kw):
    with engine.connect() as conn:
        return hybrid_search_with_trace(conn, knowledge_base_id=kb_id, query=query, strategy=strategy, **kw)


def test_filters_exclude_unsearchable_chunks(engine):
    name, other = f"t-filters-{uuid.uuid4().hex[:8]}", f"t-filters-other-{uuid.uuid4().hex[:8]}"
    texts = {f"{state}.md": f"Galaxy note {state}: stars and nebulae." for state in
             ("keep", "unpublished", "draft", "deleted", "processing", "failed", "replaced")}
    kb_id = _ingest(engine, name, texts)
    _ingest(engine, other, {"keep.md": "Galaxy note from another knowledge base: stars and nebulae."})
    old_replaced = _chunk(name, "replaced.md", texts["replaced.md"])
    texts["replaced.md"] = "Galaxy note replaced: stars, nebulae and comets."
    _ingest(engine, name, texts)  # the old chunk of replaced.md is kept with is_current = false
    with engine.begin() as conn:
        set_document_state(conn, name, "unpublished.md", publication_status="UNPUBLISHED")
        set_document_state(conn, name, "draft.md", publication_status="DRAFT")
        set_document_state(conn, name, "deleted.md", is_deleted=True)
        set_document_state(conn, name, "processing.md", status="PROCESSING")
        set_document_state(conn, name, "failed.md", status="FAILED")
    allowed = {_chunk(name, "keep.md", texts["keep.md"]), _chunk(name, "replaced.md", texts["replaced.md"])}
    for strategy in (WIDE, WIDE_BM25):
        trace = _search(engine, kb_id, "galaxy note stars nebulae", strategy)
        assert {c.chunk_id for c in trace.candidates} == allowed
        assert all(c.vector_score is not None and c.keyword_score is not None for c in trace.candidates)
        assert old_replaced not in {c.chunk_id for c in trace.candidates}
        assert {c.document_name for c in trace.candidates} == {"keep.md", "replaced.md"}


def test_vector_leg_is_exact_cosine_order(engine, kb):
    _, kb_id = kb
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT e.chunk_id, e.embedding FROM chunk_embeddings e WHERE e.knowledge_base_id = :kb AND e.model = :m"
        ), {"kb": kb_id, "m": USE}).all()
    ids = [str(r.chunk_id) for r in rows]
    matrix = np.stack([np.asarray(r.embedding.to_numpy(), dtype=np.float64) for r in rows])
    query = get_embedder(USE).embed(["which animal purrs"])
    with engine.connect() as conn:
        (trace,) = hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=["which animal purrs"],
                                       strategy=REGISTRY["vector-v1"], query_vectors=query)
    cosine = matrix @ query[0].astype(np.float64) / np.linalg.norm(matrix, axis=1)
    expected = sorted(zip(ids, cosine), key=lambda t: (-t[1], t[0]))[:10]
    assert [c.vector_rank for c in trace.candidates] == list(range(1, len(expected) + 1))
    assert [c.chunk_id for c in trace.candidates] == [i for i, _ in expected]
    for cand, (_, cos) in zip(trace.candidates, expected):
        assert cand.vector_score == pytest.approx(cos, abs=1e-6)
        assert cand.keyword_score is None and cand.final_score == cand.vector_score
    assert trace.candidates[0].document_name == "cats.md"


def test_keyword_leg_ts_rank_cd_order_and_scale(engine, kb):
    _, kb_id = kb
    trace = _search(engine, kb_id, "cat dog mammals", KEYWORD)
    assert trace.candidates, "the keyword leg found nothing"
    with engine.connect() as conn:
        raw = dict(conn.execute(sa.text(
            "SELECT c.id::text, ts_rank_cd(c.content_tsvector, to_tsquery('english', 'cat | dog | mammal')) "
            "FROM document_chunks c WHERE c.knowledge_base_id = :kb "
            "AND c.content_tsvector @@ to_tsquery('english', 'cat | dog | mammal')"), {"kb": kb_id}).all())
    assert {c.chunk_id for c in trace.candidates} == set(raw)
    expected = sorted(raw, key=lambda i: (-raw[i], i))
    assert [c.chunk_id for c in trace.candidates] == expected
    for cand in trace.candidates:  # normalisation 32 = rank / (rank + 1), Postgres float4
        r = raw[cand.chunk_id]
        assert cand.keyword_score == pytest.approx(r / (r + 1), rel=1e-6)
        assert 0 < cand.keyword_score < 1 and cand.vector_score is None
    assert [c.keyword_rank for c in trace.candidates] == list(range(1, len(raw) + 1))


def test_vector_query_uses_the_hnsw_index(engine, kb):
    """EXPLAIN of the vector leg. For a KB this small the planner rightly prefers an exact sort of its few
    vectors, so sequential scans and sorts are disabled in this transaction only (SET LOCAL)."""
    _, kb_id = kb
    with engine.begin() as conn:
        dim = conn.execute(sa.text(retrieval_sql.MODEL_DIMENSION_SQL), {"model": USE}).scalar()
        conn.execute(sa.text(retrieval_sql.VECTOR_SETTINGS_SQL), {"ef_search": 40})
        conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
        conn.execute(sa.text("SET LOCAL enable_sort = off"))
        plan = "\n".join(r[0] for r in conn.execute(
            sa.text("EXPLAIN " + retrieval_sql.vector_leg_sql(dim)),
            {"kb": kb_id, "model": USE, "k": 10, "query_vectors": [np.ones(dim, dtype=np.float32)]}))
        assert conn.execute(sa.text("SELECT current_setting('hnsw.iterative_scan')")).scalar() == "strict_order"
        assert conn.execute(sa.text("SELECT current_setting('hnsw.ef_search')")).scalar() == "40"
    assert f"Index Scan using {hnsw_index_name(USE, kb_id)} on chunk_embeddings" in plan, plan  # the KB's own
    with engine.begin() as conn:  # the walk without the searchability check reads the same index
        conn.execute(sa.text(retrieval_sql.VECTOR_SETTINGS_SQL), {"ef_search": 40})
        conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
        conn.execute(sa.text("SET LOCAL enable_sort = off"))
        plan = "\n".join(r[0] for r in driver_connection(conn).execute(  # written in the driver's parameter style
            "EXPLAIN " + retrieval_sql.vector_walk_sql(dim),
            {"kb": kb_id, "model": USE, "k": 10, "query_vectors": VectorArray([np.ones(dim, dtype=np.float32)])}))
    assert f"Index Scan using {hnsw_index_name(USE, kb_id)} on chunk_embeddings" in plan, plan
    assert "document_chunks" not in plan and "documents" not in plan, plan
    with engine.begin() as conn:  # the exact variant (fallback) cannot use the index, whatever the settings
        conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
        conn.execute(sa.text("SET LOCAL enable_sort = off"))
        plan = "\n".join(r[0] for r in conn.execute(
            sa.text("EXPLAIN " + retrieval_sql.vector_leg_sql(dim, exact=True)),
            {"kb": kb_id, "model": USE, "k": 10, "query_vectors": [np.ones(dim, dtype=np.float32)]}))
    assert "hnsw" not in plan, plan


@pytest.mark.parametrize(("k", "ef_search", "expected"), [(9, 9, 17), (9, 40, 40), (100, 100, 125)])
def test_the_vector_statement_asks_the_graph_for_every_row_it_fetches(engine, kb, k, ef_search, expected):
    """The vector leg fetches k + a tie margin (vector_cut.fetch_size): hnsw.ef_search is raised to that many for
    the statement (one graph pass, no iterative continuation), and the strategy's larger ef_search is kept."""
    _, kb_id = kb
    strategy = REGISTRY["vector-v1"].replace(version="t-ef", vector_candidate_k=k, ef_search=ef_search)
    with engine.begin() as conn:
        hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=["which animal purrs"], strategy=strategy)
        assert conn.execute(sa.text("SELECT current_setting('hnsw.ef_search')")).scalar() == str(expected)


def test_vector_leg_falls_back_to_exact_search_when_hnsw_gives_up(engine, monkeypatch):
    """Unpublished copies of the same texts in the same KB fill half of its HNSW neighbourhood (another KB's vectors
    no longer can: each KB has its own index). An index scan that stops early (simulated: iterative scans off; in
    production hnsw.max_scan_tuples) returns fewer than k searchable chunks, so the leg re-runs that question
    exactly and still delivers k."""
    name = f"t-starved-{uuid.uuid4().hex[:8]}"
    kb_id = _ingest(engine, name, {**CORPUS, **{f"copy-{n}": t for n, t in CORPUS.items()}})
    with engine.begin() as conn:
        for n in CORPUS:
            set_document_state(conn, name, f"copy-{n}", publication_status="UNPUBLISHED")
    monkeypatch.setattr(retrieval_sql, "VECTOR_SETTINGS_SQL",
                        retrieval_sql.VECTOR_SETTINGS_SQL.replace("'strict_order'", "'off'"))
    strategy = REGISTRY["vector-v1"].replace(version="t-starved", vector_candidate_k=9, ef_search=9)
    query = get_embedder(USE).embed(["which animal purrs"])
    with engine.begin() as conn:
        for setting in ("enable_seqscan = off", "enable_sort = off"):  # the HNSW plan even for a tiny KB
            conn.execute(sa.text(f"SET LOCAL {setting}"))
        conn.execute(sa.text(retrieval_sql.VECTOR_SETTINGS_SQL), {"ef_search": 9})
        dim = conn.execute(sa.text(retrieval_sql.MODEL_DIMENSION_SQL), {"model": USE}).scalar()
        hnsw_only = conn.execute(sa.text(retrieval_sql.vector_leg_sql(dim)),
                                 {"kb": kb_id, "model": USE, "k": 9, "query_vectors": list(query)}).all()
        (trace,) = hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=["q"], strategy=strategy,
                                       query_vectors=query)
    assert len(hnsw_only) < 9
    assert len(trace.candidates) == 9 == len(CORPUS)
    monkeypatch.undo()
    with engine.connect() as conn:
        (full,) = hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=["q"], query_vectors=query,
                                      strategy=strategy.replace(ef_search=100))
    assert [c.chunk_id for c in trace.candidates] == [c.chunk_id for c in full.candidates]


def _counting(monkeypatch, name: str) -> list[tuple[int, bool]]:
    """Count the calls of ``retrieval_sql.<name>``: each call's question count and whether it searched exactly."""
    calls: list[tuple[int, bool]] = []
    original = getattr(retrieval_sql, name)

    def counted(conn, dimension, params, **kw):
        calls.append((len(params["query_vectors"].rows), kw.get("exact", False)))
        return original(conn, dimension, params, **kw)

    monkeypatch.setattr(retrieval_sql, name, counted)
    return calls


@pytest.mark.parametrize("unsearchable", [False, True])
def test_the_walk_with_the_keyword_index_s_chunks_returns_the_checking_statement_s_rows(engine, monkeypatch,
                                                                                      unsearchable):
    """With the keyword leg's in-memory index, the vector leg walks the HNSW index without its searchability check
    and document join and takes the documents from the index: the same candidates, scores and documents as the
    checking statement. A question whose walk meets an unsearchable vector (an unpublished copy, a replaced chunk)
    is asked again by the checking statement; the others are not."""
    name = f"t-walk-{uuid.uuid4().hex[:8]}"
    texts = {**CORPUS, **{f"copy-{n}": t for n, t in CORPUS.items()},
             **{f"star-{n}.md": f"Star catalogue entry {n}: a star of magnitude {n} bound by gravity in a galaxy."
                for n in range(20)}}
    kb_id = _ingest(engine, name, texts)
    if unsearchable:
        texts["ocean.md"] = "Whales, dolphins and seals are marine mammals of the ocean."
        _ingest(engine, name, texts)  # the first ocean.md chunk stays, not current
        with engine.begin() as conn:
            for n in CORPUS:
                if n not in ("space.md", "sql.md"):
                    set_document_state(conn, name, f"copy-{n}", publication_status="UNPUBLISHED")
    strategy = WIDE_BM25.replace(version="t-walk", vector_candidate_k=5, ef_search=40)
    questions = ["which animal purrs", "whales in the ocean", "stars and gravity", "a star in a galaxy catalogue"]
    vectors = get_embedder(USE).embed(questions)

    def search(keyword_index):
        with engine.begin() as conn:
            for setting in ("enable_seqscan = off", "enable_sort = off"):  # the HNSW plan even for a tiny KB
                conn.execute(sa.text(f"SET LOCAL {setting}"))
            return hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=questions, strategy=strategy,
                                       query_vectors=vectors, keyword_index=keyword_index)

    checked = search(None)
    with engine.connect() as conn:
        index = Bm25Index.load(conn, kb_id, strategy.bm25_k1, strategy.bm25_b)
    walks, checks = _counting(monkeypatch, "vector_walk"), _counting(monkeypatch, "vector_leg")
    walked = search(index)
    assert walks == [(len(questions), False)]
    assert [[tuple(c) for c in t.candidates] for t in walked] == [[tuple(c) for c in t.candidates] for t in checked]
    names = {c.document_name for t in walked for c in t.candidates}
    if unsearchable:  # the animal and ocean questions meet unpublished copies or the replaced chunk
        # the HNSW statement with the check, for some questions only (the star questions walk among the star
        # entries); no exact search: the walk's unsearchable rows are not taken for a scan that gave up early
        assert len(checks) == 1 and 0 < checks[0][0] < len(questions) and not checks[0][1], checks
        assert not any(n.startswith("copy-") and n not in ("copy-space.md", "copy-sql.md") for n in names)
    else:
        assert checks == []
        assert any(n.startswith("copy-") for n in names)


def test_fusion_seed_example_on_a_constructed_pool():
    vector = [LegHit("a", "d1", "a.md", 0.8123), LegHit("b", "d2", "b.md", 0.6)]
    keyword = [LegHit("c", "d3", "c.md", 0.9), LegHit("a", "d1", "a.md", 0.5)]
    trace = fuse_pool("q", vector, keyword, HYBRID_V1, limit=2)
    a, b, c = trace.candidates
    assert (a.chunk_id, a.final_score) == ("a", pytest.approx(0.71861, abs=1e-12))
    assert round(a.final_score, 4) == 0.7186  # the seed's example
    assert (a.vector_rank, a.keyword_rank, a.keyword_score) == (1, 2, 0.5)
    assert (b.chunk_id, b.final_score, b.keyword_score, b.keyword_rank) == ("b", pytest.approx(0.42), None, None)
    assert (c.chunk_id, c.final_score, c.vector_score) == ("c", pytest.approx(0.27), None)
    assert [x.rank for x in trace.candidates] == [1, 2, 3] and trace.selected == trace.candidates[:2]
    assert all(x.rerank_score is None and x.strategy_version == "hybrid-v1" for x in trace.candidates)


def test_end_to_end_hybrid_v1_final_is_weighted_sum(engine, kb):
    _, kb_id = kb
    with engine.connect() as conn:
        traces = hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=QUESTIONS, strategy=HYBRID_V1)
    both = 0
    for trace in traces:
        for cand in trace.candidates:
            expected = 0.7 * (cand.vector_score or 0.0) + 0.3 * (cand.keyword_score or 0.0)
            assert cand.final_score == pytest.approx(expected, abs=1e-12)
            both += cand.vector_score is not None and cand.keyword_score is not None
        finals = [c.final_score for c in trace.candidates]
        assert finals == sorted(finals, reverse=True)
        assert len(trace.selected) == min(10, len(trace.candidates))
    assert both > 0


def test_tie_break_is_deterministic(engine, kb):
    name, kb_id = kb
    tie = fuse_pool("q", [LegHit("z", "d", "z", 0.5), LegHit("y", "d", "y", 0.2), LegHit("x", "d", "x", 0.2)],
                    [LegHit("w", "d", "w", 0.7), LegHit("v", "d", "v", 0.7)],
                    HYBRID_V1.replace(vector_weight=0.3, keyword_weight=0.3), 10)
    # finals: z .15, y .06, x .06, w .21, v .21 -> w/v tie (no vector: chunk id), x/y tie (vector equal: id)
    assert [c.chunk_id for c in tie.candidates] == ["v", "w", "z", "x", "y"]
    tie2 = fuse_pool("q", [LegHit("b", "d", "b", 0.3)], [LegHit("a", "d", "a", 0.7)],
                     HYBRID_V1.replace(vector_weight=0.7, keyword_weight=0.3), 10)
    assert [c.chunk_id for c in tie2.candidates] == ["b", "a"]  # equal final 0.21: vector present wins
    # Real twins: identical text -> identical scores in both legs -> chunk id decides, every time.
    twins = sorted(_chunk(name, d, CORPUS[d]) for d in ("twin-a.md", "twin-b.md"))
    orders = set()
    for _ in range(3):
        trace = _search(engine, kb_id, "lighthouses on rocky coasts", HYBRID_V1)
        assert trace.candidates[0].final_score == trace.candidates[1].final_score
        orders.add(tuple(c.chunk_id for c in trace.candidates))
    assert len(orders) == 1 and list(next(iter(orders))[:2]) == twins


def test_batch_equals_single_question_path(engine, kb):
    _, kb_id = kb
    vectors = get_embedder(USE).embed(QUESTIONS)
    for strategy in (HYBRID_V1, REGISTRY["hybrid-bm25-v1"], REGISTRY["rrf-v1"], REGISTRY["bm25-v1"]):
        with engine.connect() as conn:
            batch = hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=QUESTIONS, strategy=strategy,
                                        limits=[3] * len(QUESTIONS), query_vectors=vectors)
            singles = [hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=[q], strategy=strategy,
                                           limits=[3], query_vectors=vectors[i:i + 1])[0]
                       for i, q in enumerate(QUESTIONS)]
            own = [hybrid_search_with_trace(conn, knowledge_base_id=kb_id, query=q, strategy=strategy, limit=3)
                   for q in QUESTIONS]
        assert batch == singles  # same vectors: bit-identical traces
        # Each path embedding itself: query vectors differ by ~1e-7, so the same pool with the same
        # scores to 1e-6 (two candidates closer than that may swap places).
        for b, s in zip(batch, own):
            by_id = {c.chunk_id: c.final_score for c in s.candidates}
            assert {c.chunk_id: c.final_score for c in b.candidates} == pytest.approx(by_id, abs=1e-6)
            assert [c.final_score for c in b.candidates] == pytest.approx(sorted(by_id.values())[::-1], abs=1e-6)


def test_limits_and_empty_inputs(engine, kb):
    _, kb_id = kb
    with engine.connect() as conn:
        assert hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=[], strategy=HYBRID_V1) == []
        traces = hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=["cat", "dog"], strategy=HYBRID_V1,
                                     limits=[1, 4])
        with pytest.raises(ValueError, match="2 limits"):
            hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=["cat"], strategy=HYBRID_V1, limits=[1, 2])
        stop_words_only = hybrid_search_with_trace(conn, knowledge_base_id=kb_id, query="the", strategy=HYBRID_V1)
    assert [len(t.selected) for t in traces] == [1, 4]
    assert traces[0].selected == traces[0].candidates[:1]
    assert stop_words_only.candidates and all(c.keyword_score is None for c in stop_words_only.candidates)


@pytest.mark.parametrize("question", ["'; DROP TABLE x; --", "&|!():*<->", "a & b | !c <-> d:*",
                                      "x\x00y\x01z\x1f\t\r\n", "\\' OR 1=1 --", "'''", "", "   ",
                                      "drop table; DELETE FROM documents"])
def test_hostile_questions_are_searched_as_text(engine, kb, question):
    _, kb_id = kb
    for strategy in (HYBRID_V1, WIDE_BM25):
        trace = _search(engine, kb_id, question, strategy)
        assert len(trace.candidates) >= 1  # the vector leg always answers
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM documents WHERE knowledge_base_id = :kb"),
                            {"kb": kb_id}).scalar() == len(CORPUS)


def test_sql_text_in_a_question_finds_the_document_that_contains_it(engine, kb):
    _, kb_id = kb
    trace = _search(engine, kb_id, "'; DROP TABLE x; --", KEYWORD)
    assert [c.document_name for c in trace.candidates] == ["sql.md"]


def test_text_search_mode_mismatch_and_missing_model_are_clear_errors(engine, kb):
    name, kb_id = kb
    with pytest.raises(RetrievalError, match="text_search='english'"):
        _search(engine, kb_id, "cat", KEYWORD.replace(text_search="simple"))
    assert _search(engine, kb_id, "cat", KEYWORD.replace(text_search="english")).candidates
    with pytest.raises(RetrievalError, match="--models all-minilm-l6-v2"):
        _search(engine, kb_id, "cat", REGISTRY["vector-minilm-v1"])
    with pytest.raises(RetrievalError, match="no knowledge base"):
        _search(engine, uuid.uuid4(), "cat", HYBRID_V1)


def test_minilm_strategy_on_a_minilm_kb(engine):
    name = f"t-minilm-{uuid.uuid4().hex[:8]}"
    kb_id = _ingest(engine, name, CORPUS, models=["all-minilm-l6-v2"])
    trace = _search(engine, kb_id, "which animal purrs", REGISTRY["hybrid-bm25-minilm-v1"])
    assert trace.selected[0].document_name == "cats.md"
    assert trace.selected[0].vector_score is not None and trace.selected[0].keyword_score is not None


def test_strategy_parameter_hash_refusal(engine):
    version = f"t-store-{uuid.uuid4().hex[:8]}-v1"
    strategy = HYBRID_V1.replace(version=version)
    with engine.begin() as conn:  # idempotent; the description is not a parameter
        first = register_strategy(conn, strategy)
        assert register_strategy(conn, strategy) == first == strategy.params_hash()
        assert register_strategy(conn, strategy.replace(description="new words")) == first
    changed = strategy.replace(vector_weight=0.5, keyword_weight=0.5)
    with engine.begin() as conn, pytest.raises(StrategyConflictError) as err:
        register_strategy(conn, changed)
    message = str(err.value)
    assert f"strategy {version} was run before with different parameters" in message
    assert first[:12] in message and changed.params_hash()[:12] in message
    assert "vector_weight: 0.7 → 0.5" in message
    assert f"bump the version (e.g. {version[:-1]}2)" in message
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT params_hash, params FROM retrieval_strategies WHERE version = :v"),
                              {"v": version}).one()
    assert stored.params_hash == first and stored.params["vector_weight"] == 0.7



@pytest.mark.parametrize("scorer", ["ts_rank_cd", "bm25"])
def test_targets_leave_the_pool_unchanged_and_rank_the_rest_of_the_keyword_leg(engine, kb, scorer):
    """With targets the keyword leg ranks every match; pools must be identical to the plain path, and a target
    below the leg's k gets exactly the score and rank it has in a leg deep enough to hold it."""
    name, kb_id = kb
    shallow = HYBRID_V1.replace(version=f"t-shallow-{scorer}", keyword_scorer=scorer,
                                vector_candidate_k=1, keyword_candidate_k=1)
    deep = shallow.replace(version=f"t-deep-{scorer}", keyword_candidate_k=50)
    targets = [[_chunk(name, d, t) for d, t in CORPUS.items()] + ["not-a-uuid"] for _ in QUESTIONS]
    vectors = get_embedder(USE).embed(QUESTIONS)
    with engine.connect() as conn:
        args = {"knowledge_base_id": kb_id, "queries": QUESTIONS, "query_vectors": vectors}
        plain = hybrid_search_batch(conn, strategy=shallow, **args)
        with_targets = hybrid_search_batch(conn, strategy=shallow, targets=targets, **args)
        deep_pool = hybrid_search_batch(conn, strategy=deep, **args)
    assert with_targets == plain and all(not t.keyword_targets for t in plain)
    checked = 0
    for trace, reference, wanted in zip(with_targets, deep_pool, targets, strict=True):
        leg = {c.chunk_id: c for c in reference.candidates if c.keyword_rank is not None}
        in_top = {c.chunk_id for c in trace.candidates if c.keyword_rank is not None}
        assert set(trace.keyword_targets) == set(wanted[:-1]) - in_top  # the non-UUID is dropped
        for chunk_id, got in trace.keyword_targets.items():
            if chunk_id in leg:
                assert got == {"keyword_score": pytest.approx(leg[chunk_id].keyword_score, abs=1e-12),
                               "keyword_rank": leg[chunk_id].keyword_rank}
                assert got["keyword_rank"] > 1
                checked += 1
            else:
                assert got == {"keyword_score": None, "keyword_rank": None}
    assert checked >= 3
