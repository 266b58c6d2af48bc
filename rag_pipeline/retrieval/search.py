"""Hybrid retrieval with a full trace (docs/design.md §3.1): vector leg + keyword leg → merged, fused, ordered pool.

One SQL statement per enabled leg serves a batch (:func:`hybrid_search_batch`). The vector cut is :mod:`vector_cut`,
the optional stages :mod:`stages`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import sqlalchemy as sa

from rag_pipeline.knowledge_base import textsearch
from rag_pipeline.knowledge_base.embedding import get_embedder
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseRef
from rag_pipeline.retrieval import sql as retrieval_sql
from rag_pipeline.retrieval import stages, vector_cut
from rag_pipeline.retrieval.bm25_index import Bm25Index
from rag_pipeline.retrieval.bm25_sql import BM25_LEG_SQL, BM25_TARGETS_LEG_SQL, bm25_params
from rag_pipeline.retrieval.dense_index import DenseIndex
from rag_pipeline.retrieval.leg_cache import LegCache
from rag_pipeline.retrieval.stage_clock import StageClock, timed
from rag_pipeline.retrieval.stages import fuse_pool, fuse_pools
from rag_pipeline.retrieval.strategies import MAX_EF_SEARCH, Strategy
from rag_pipeline.retrieval.trace import Candidate, LegHit, RetrievalError, RetrievalTrace
from rag_pipeline.settings import get_settings
from rag_pipeline.storage.ids import uuid_strings
from rag_pipeline.storage.vector_params import VectorArray

__all__ = ["Candidate", "LegHit", "RetrievalError", "RetrievalTrace", "StatementTimeout", "fuse_pool",
           "hybrid_search_batch", "text_search_mode", "walk_ahead"]


def hybrid_search_batch(conn: sa.Connection, *, knowledge_base_id, queries: Sequence[str], strategy: Strategy,
                        limits: Sequence[int] | None = None, query_vectors: np.ndarray | None = None,
                        targets: Sequence[Sequence[str]] | None = None,
                        keyword_index: Bm25Index | None = None,
                        vector_index: DenseIndex | None = None,
                        clock: StageClock | None = None, leg_cache: LegCache | None = None,
                        first_walk: list[tuple[int, str, float]] | None = None) -> list[RetrievalTrace]:
    """Search many questions: one embedding call and one SQL statement per enabled leg for the batch.

    ``conn`` must be in a transaction: the HNSW settings and the statement timeout (``RAG_STATEMENT_TIMEOUT_S``,
    :class:`StatementTimeout`) are ``SET LOCAL``. ``limits`` default to ``strategy.final_top_k``; ``query_vectors``
    skip the embedding; ``targets`` (chunk ids per question) make the keyword leg report in
    ``trace.keyword_targets`` the targets it ranked below its top k, pools unchanged; ``keyword_index`` serves the
    keyword leg from memory, BM25 or ts_rank_cd (identical hits and scores); ``vector_index`` serves a
    ``vector_search: exact`` leg from memory (the SQL exact statement's candidates, scores within float tolerance;
    an HNSW strategy ignores it); ``clock`` sums the seconds of ``vector_leg``, ``keyword_leg``,
    ``pool_completion``, ``fusion`` and ``rerank``; ``leg_cache`` (of this knowledge base's content version) keeps
    and gives back the hits of the SQL vector leg (:mod:`leg_cache`); ``first_walk``: the rows
    :func:`walk_ahead` read for these questions, taken for the HNSW leg's first search of them all."""
    if strategy.http is not None:
        raise RetrievalError(f"strategy {strategy.version} is an HTTP retriever (kind http): `evaluate` and `suggest` "
                             "ask it; it has no leg of ours to search with")
    queries = list(queries)
    if any(not isinstance(q, str) for q in queries):
        raise TypeError("every question must be a str")
    limits = _check_limits(limits, len(queries), strategy.final_top_k)
    if not queries:
        return []
    kb = retrieval_sql.knowledge_base(conn, knowledge_base_id)
    if kb is None:
        raise RetrievalError(f"no knowledge base with id {knowledge_base_id}")
    if targets is not None and len(targets) != len(queries):
        raise ValueError(f"got {len(targets)} target lists for {len(queries)} questions")
    _bound_statements(conn)
    complete = strategy.complete_pool and strategy.vector_candidate_k > 0 and strategy.keyword_candidate_k > 0
    done: list[dict] = [{} for _ in queries]
    if strategy.vector_search != "exact":
        vector_index = None
    # the SQL exact vector leg reads every vector for each question: a timeout there is the scan, not the question
    scanning = bool(strategy.vector_candidate_k) and strategy.vector_search == "exact" and vector_index is None
    try:
        with timed(clock if strategy.vector_candidate_k else None, "vector_leg"):
            documents = keyword_index.documents if keyword_index and keyword_index.knowledge_base_id == str(kb.id) \
                else None
            vector_hits, vectors = _vector_leg(conn, kb, queries, strategy, query_vectors, vector_index, leg_cache,
                                               documents, first_walk)
        scanning = False
        leg_targets = stages.completion_targets(vector_hits, targets) if complete else targets
        with timed(clock if strategy.keyword_candidate_k else None, "keyword_leg"):
            keyword_hits, keyword_targets = _keyword_leg(conn, kb, queries, strategy, leg_targets, keyword_index)
        if complete:
            with timed(clock, "pool_completion"):
                done, keyword_targets = stages.split_keyword_targets(keyword_targets, targets, vector_hits)
                completed = {"vector": stages.complete_vector(conn, kb.id, strategy, vectors, vector_hits,
                                                              keyword_hits, vector_index)}
        with timed(clock, "fusion"):
            traces = fuse_pools(queries, vector_hits, keyword_hits, strategy, limits,
                                [{"keyword": done[i], "vector": completed["vector"][i]} for i in range(len(queries))]
                                if complete else None)
        if strategy.rerank is not None:
            with timed(clock, "rerank"):
                traces = stages.rerank_batch(conn, kb, strategy.version, strategy.rerank, traces, limits)
    except sa.exc.OperationalError as exc:
        if not is_statement_timeout(exc):
            raise
        if scanning:
            raise StatementTimeout(exact_scan_timeout_message(len(queries)), whole_scan=True) from None
        raise StatementTimeout(statement_timeout_message()) from None
    for trace, found in zip(traces, keyword_targets, strict=True):
        trace.keyword_targets.update(found)
    return traces


class StatementTimeout(RetrievalError):  # noqa: N818 - reads as the event it reports
    """A retrieval statement ran longer than ``RAG_STATEMENT_TIMEOUT_S``: a hostile or huge question, or
    (``whole_scan``) the SQL exact vector leg, which reads every vector of the knowledge base for each question."""

    def __init__(self, message: str, *, whole_scan: bool = False):
        super().__init__(message)
        self.whole_scan = whole_scan


def is_statement_timeout(exc: BaseException) -> bool:
    """``exc`` is PostgreSQL cancelling a statement for ``statement_timeout`` (SQLSTATE 57014, not a user's
    cancel request)."""
    orig = getattr(exc, "orig", exc)
    return getattr(orig, "sqlstate", None) == "57014" and "user request" not in str(orig)


def statement_timeout_message() -> str:
    return (f"retrieval took longer than {get_settings().statement_timeout_s:g} s (RAG_STATEMENT_TIMEOUT_S); "
            "shorten the question or raise RAG_STATEMENT_TIMEOUT_S")


def exact_scan_timeout_message(questions: int) -> str:
    return (f"the exact vector leg's SQL statement for {questions} question(s) took longer than "
            f"{get_settings().statement_timeout_s:g} s (RAG_STATEMENT_TIMEOUT_S): it reads every vector of the "
            "knowledge base for each question. Let the leg run in memory (RAG_EXACT_VECTOR_LEG=memory, the default, "
            "with RAG_MEMORY_LEGS_MB above the estimate the run logged), raise RAG_STATEMENT_TIMEOUT_S, or use a "
            "smaller --batch-size")


def _check_limits(limits: Sequence[int] | None, n: int, default: int) -> list[int]:
    if limits is None:
        return [default] * n
    limits = list(limits)
    if len(limits) != n:
        raise ValueError(f"got {len(limits)} limits for {n} questions")
    if any(isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1 for k in limits):
        raise ValueError(f"every limit must be a positive integer, got {limits}")
    return [int(k) for k in limits]


def text_search_mode(kb: sa.Row | KnowledgeBaseRef, strategy: Strategy) -> str:
    """The KB's text-search mode; a strategy naming another concrete mode is refused (the tsvectors
    were built with the KB's mode, a query in another mode would silently miss)."""
    if strategy.text_search not in ("kb", kb.text_search):
        raise RetrievalError(
            f"strategy {strategy.version} searches text with mode {strategy.text_search!r}, but knowledge base "
            f"{kb.name!r} was ingested with text_search={kb.text_search!r}; use a strategy with text_search "
            f"'kb' or {kb.text_search!r}, or re-ingest into a new knowledge base with --text-search "
            f"{strategy.text_search}")
    return kb.text_search


def preflight(conn: sa.Connection, kb: sa.Row | KnowledgeBaseRef, strategy: Strategy) -> None:
    """Fail before an evaluation writes anything when ``strategy`` cannot search this knowledge base: text-search
    mode, embeddings of its model (and the model loads), the rerank stage's inputs."""
    text_search_mode(kb, strategy)
    if strategy.vector_candidate_k:
        if not retrieval_sql.has_embeddings(conn, kb.id, strategy.embedding_model):
            raise RetrievalError(
                f"knowledge base {kb.name!r} has no embeddings of model {strategy.embedding_model!r}, which "
                f"strategy {strategy.version} uses; ingest it with --models {strategy.embedding_model} "
                "or pick another strategy")
        get_embedder(strategy.embedding_model)
    stages.preflight_rerank(conn, kb, strategy)


def _vector_leg(conn, kb, queries, strategy: Strategy, query_vectors, index: DenseIndex | None = None,
                cache: LegCache | None = None, documents: dict[str, tuple[str, str]] | None = None,
                first_walk: list[tuple[int, str, float]] | None = None) -> tuple[list[list[LegHit]], np.ndarray]:
    """The leg's hits per question, and the questions' vectors (an empty array without the leg). ``documents``:
    the knowledge base's searchable chunks with their documents, in the caller's snapshot (``Bm25Index.documents``):
    the HNSW walk then runs without its searchability check and document join (``retrieval_sql.VECTOR_WALK_SQL``),
    the same rows; ``first_walk``, that walk's rows for the first search of every question, read already."""
    if strategy.vector_candidate_k == 0:
        return [[] for _ in queries], np.empty((len(queries), 0), dtype=np.float32)
    model = strategy.embedding_model
    params = {"kb": kb.id, "model": model}
    dimension = retrieval_sql.model_dimension(conn, model)
    if dimension is None or not retrieval_sql.has_embeddings(conn, kb.id, model):
        raise RetrievalError(
            f"knowledge base {kb.name!r} has no embeddings of model {model!r}, which strategy "
            f"{strategy.version} uses; ingest it with that model too (rag-pipeline ingest ... --models {model}) "
            f"or pick a strategy of an ingested model")
    if query_vectors is None:
        query_vectors = get_embedder(model).embed(queries)
    vectors = np.asarray(query_vectors, dtype=np.float32)
    if vectors.shape != (len(queries), dimension):
        raise ValueError(f"query_vectors must have shape {(len(queries), dimension)}, got {vectors.shape}")
    if index is not None:
        index.check(kb.id, model)
        return index.top(vectors, strategy.vector_candidate_k), vectors

    walked = [first_walk]

    def search(indexes, limit: int, exact: bool) -> list[list[LegHit]]:
        ef_search = _ef_search(strategy, limit)
        retrieval_sql.set_vector_settings(conn, ef_search)
        batch = VectorArray(vectors[list(indexes)])
        if documents is None or exact:
            rows = retrieval_sql.vector_leg(conn, dimension, {**params, "query_vectors": batch, "k": limit},
                                            exact=exact)
            return _group(rows, len(indexes))
        walk, walked[0] = walked[0], None
        if walk is None or limit != vector_cut.fetch_size(strategy.vector_candidate_k) \
                or list(indexes) != list(range(len(queries))):  # not the search the rows were read for
            walk = retrieval_sql.vector_walk(conn, dimension, {**params, "query_vectors": batch, "k": limit})
        hits, unsearchable = _documented(walk, len(indexes), documents)
        if unsearchable:  # a row the check would have skipped: that question's rows by the checking statement
            again = sorted(unsearchable)
            rows = retrieval_sql.vector_leg(conn, dimension, {**params, "query_vectors": VectorArray(
                vectors[[indexes[j] for j in again]]), "k": limit})
            for j, leg in zip(again, _group(rows, len(again)), strict=True):
                hits[j] = leg
        return hits

    def available() -> int:
        return retrieval_sql.searchable_vectors(conn, kb.id, model)

    exact = strategy.vector_search == "exact"
    if cache is None:
        return vector_cut.top_k(search, len(queries), strategy.vector_candidate_k, available, exact=exact), vectors
    keys = cache.keys((model, strategy.vector_search, strategy.ef_search, strategy.vector_candidate_k), vectors)
    legs = cache.take(keys)
    todo = [i for i, hits in enumerate(legs) if hits is None]
    if todo:
        found = vector_cut.top_k(lambda indexes, limit, exact_: search([todo[j] for j in indexes], limit, exact_),
                                 len(todo), strategy.vector_candidate_k, available, exact=exact)
        cache.keep([keys[i] for i in todo], found)
        for i, hits in zip(todo, found, strict=True):
            legs[i] = hits
    return [list(hits or ()) for hits in legs], vectors


def _bound_statements(conn: sa.Connection) -> None:
    """``RAG_STATEMENT_TIMEOUT_S`` for the rest of ``conn``'s transaction (``SET LOCAL``)."""
    retrieval_sql.set_statement_timeout(conn, max(1, round(get_settings().statement_timeout_s * 1000)))


def _ef_search(strategy: Strategy, limit: int) -> int:
    """ef_search >= the rows fetched: one HNSW pass returns at most ef_search rows, and the iterative scan that
    fetches the rest (the tie margin of vector_cut) costs more than one pass of that size (bench/RESULTS.md)."""
    return min(max(strategy.ef_search, limit), MAX_EF_SEARCH)


def walk_ahead(conn: sa.Connection, knowledge_base_id, strategy: Strategy,
               query_vectors: np.ndarray) -> list[tuple[int, str, float]] | None:
    """The rows of the HNSW leg's first search of these questions without its searchability check
    (``retrieval_sql.VECTOR_WALK_SQL``), read before the keyword leg's index, whose chunks make them the leg's rows,
    is at hand (an evaluation's first batches while its indexes load): pass them to :func:`hybrid_search_batch`
    as ``first_walk``. None: the strategy's vector leg does not walk the index that way."""
    if (strategy.http is not None or not strategy.vector_candidate_k or strategy.vector_search == "exact"
            or not strategy.keyword_candidate_k):
        return None
    dimension = retrieval_sql.model_dimension(conn, strategy.embedding_model)
    vectors = np.asarray(query_vectors, dtype=np.float32)
    if dimension is None or vectors.ndim != 2 or vectors.shape[1] != dimension:
        return None  # hybrid_search_batch says what is wrong
    limit = vector_cut.fetch_size(strategy.vector_candidate_k)
    _bound_statements(conn)
    retrieval_sql.set_vector_settings(conn, _ef_search(strategy, limit))
    return retrieval_sql.vector_walk(conn, dimension, {
        "kb": knowledge_base_id, "model": strategy.embedding_model, "k": limit,
        "query_vectors": VectorArray(vectors)})


def _keyword_leg(conn, kb, queries, strategy: Strategy, targets=None,
                 index: Bm25Index | None = None) -> tuple[list[list[LegHit]], list[dict]]:
    """The leg's hits per question, and per question ``{target chunk id: {keyword_score, keyword_rank}}``
    for the targets below the leg's top k (empty dicts without ``targets``)."""
    below: list[dict] = [{} for _ in queries]
    if strategy.keyword_candidate_k == 0:
        return [[] for _ in queries], below
    mode = text_search_mode(kb, strategy)
    k = strategy.keyword_candidate_k
    params = {"kb": kb.id, "cfg": textsearch.regconfig(mode), "k": k,
              "query_texts": [textsearch.prepare(mode, q) for q in queries]}
    wanted = None if targets is None else [uuid_strings(t) for t in targets]
    if index is not None:  # either scorer, in memory (bm25_index: the same hits and scores as the statements below)
        return index.leg(conn, kb.id, strategy, params["cfg"], params["query_texts"], wanted)
    if strategy.keyword_scorer == "bm25":
        sql = BM25_LEG_SQL if targets is None else BM25_TARGETS_LEG_SQL
        params |= bm25_params(strategy.bm25_k1, strategy.bm25_b)
    elif strategy.keyword_scorer == "ts_rank_cd":
        sql = retrieval_sql.TS_RANK_CD_LEG_SQL if targets is None else retrieval_sql.TS_RANK_CD_TARGETS_LEG_SQL
    else:  # pragma: no cover - Strategy validates the scorer
        raise RetrievalError(f"unknown keyword scorer {strategy.keyword_scorer!r}")
    if wanted is None:
        return _group(retrieval_sql.keyword_leg(conn, sql, params), len(queries)), below
    params["targets"] = ["{" + ",".join(ids) + "}" for ids in wanted]
    rows = retrieval_sql.keyword_leg(conn, sql, params).all()
    for i, ids in enumerate(wanted):
        below[i].update(dict.fromkeys(ids))  # scored below k, or (None) no match at all
    top = []
    for row in rows:
        if row.leg_rank <= k:
            top.append(row)
            below[row.query_index - 1].pop(str(row.chunk_id), None)
        else:
            below[row.query_index - 1][str(row.chunk_id)] = {"keyword_score": float(row.score),
                                                             "keyword_rank": int(row.leg_rank)}
    none = {"keyword_score": None, "keyword_rank": None}
    return _group(top, len(queries)), [{c: v or dict(none) for c, v in found.items()} for found in below]


def _documented(rows, n: int, documents: dict[str, tuple[str, str]]) -> tuple[list[list[LegHit]], set[int]]:
    """:data:`retrieval_sql.VECTOR_WALK_SQL` rows → per question, its hits with their documents (in walk order;
    ``vector_cut`` sorts them), and the questions with a row whose chunk is not in ``documents``."""
    hits: list[list[LegHit]] = [[] for _ in range(n)]
    unsearchable: set[int] = set()
    for query_index, chunk_id, score in rows:
        document = documents.get(chunk_id)
        if document is None:
            unsearchable.add(query_index - 1)
        else:
            hits[query_index - 1].append(LegHit(chunk_id, document[0], document[1], score))
    return hits, unsearchable


def _group(rows, n: int) -> list[list[LegHit]]:
    """Rows of a leg → per question, best first (score desc, then chunk id asc: deterministic leg ranks)."""
    hits: list[list[LegHit]] = [[] for _ in range(n)]
    for row in rows:
        hits[row.query_index - 1].append(
            LegHit(str(row.chunk_id), str(row.document_id), row.document_name, float(row.score)))
    for leg in hits:
        leg.sort(key=lambda h: (-h.score, h.chunk_id))
    return hits
