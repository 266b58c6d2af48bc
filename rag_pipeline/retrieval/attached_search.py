"""A strategy's legs on an attached knowledge base: SQL on the user's tables (:mod:`attached_sql`) in the caller's
read-only transaction, fused by the same code as the project's own knowledge bases (:func:`stages.fuse_pool`).

Only the SQL legs serve an attached knowledge base: the in-memory BM25 and exact indexes need the project's term
statistics and vector tables, which are never built in the user's database. So the keyword scorer is
``ts_rank_cd``; the vector leg is ``ORDER BY embedding <=> question`` (the user's own HNSW/IVFFlat index serves it
when there is one, else an exact scan)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import sqlalchemy as sa

from rag_pipeline.knowledge_base import textsearch
from rag_pipeline.knowledge_base.attached import AttachedKnowledgeBase
from rag_pipeline.retrieval import attached_sql, vector_cut
from rag_pipeline.retrieval.stages import fuse_pool
from rag_pipeline.retrieval.strategies import Strategy
from rag_pipeline.retrieval.trace import LegHit, RetrievalError, RetrievalTrace


def check_strategy(attached: AttachedKnowledgeBase, strategy: Strategy) -> None:
    """Fail before anything is written when ``strategy`` needs what an attached knowledge base cannot give."""
    m, version, name = attached.mapping, strategy.version, attached.kb.name

    def refuse(why: str) -> None:
        raise RetrievalError(f"strategy {version} cannot search attached knowledge base {name!r}: {why}")

    if strategy.http is not None:
        refuse("it is an HTTP retriever")
    if strategy.keyword_candidate_k and strategy.keyword_scorer != "ts_rank_cd":
        refuse(f"its keyword scorer is {strategy.keyword_scorer} (BM25 needs term statistics this project keeps "
               "only for its own knowledge bases); use a ts_rank_cd strategy")
    if strategy.vector_candidate_k:
        if m.embedding is None:
            refuse("the mapping has no embedding column")
        if strategy.embedding_model != m.embedding_model:
            refuse(f"it embeds questions with {strategy.embedding_model!r}, the stored vectors are "
                   f"{m.embedding_model!r}")
    if strategy.text_search not in ("kb", m.text_search) and strategy.keyword_candidate_k:
        refuse(f"its text mode {strategy.text_search!r} is not the mapping's {m.text_search!r}")
    if strategy.rerank is not None:
        refuse("a rerank stage is not available on an attached knowledge base")
    if strategy.complete_pool:
        refuse("complete_pool is not available on an attached knowledge base")


def _array_literal(ids: Sequence[str]) -> str:
    return "{" + ",".join('"' + i.replace("\\", "\\\\").replace('"', '\\"') + '"' for i in ids) + "}"


def _group(rows, n: int) -> list[list[LegHit]]:
    hits: list[list[LegHit]] = [[] for _ in range(n)]
    for row in rows:
        hits[row.query_index - 1].append(LegHit(row.chunk_id, row.document_id, row.document_name, float(row.score)))
    for leg in hits:
        leg.sort(key=vector_cut.leg_order)
    return hits


def search_batch(conn: sa.Connection, attached: AttachedKnowledgeBase, queries: Sequence[str], strategy: Strategy,
                 limits: Sequence[int], query_vectors: np.ndarray | None,
                 targets: Sequence[Sequence[str]] | None = None) -> list[RetrievalTrace]:
    """Per question, the fused pool (chunk ids as the user's text); ``targets``: the keyword leg also reports the
    targets it ranked below its top k (``trace.keyword_targets``)."""
    names = attached.names
    n = len(queries)
    vector_hits: list[list[LegHit]] = [[] for _ in range(n)]
    keyword_hits: list[list[LegHit]] = [[] for _ in range(n)]
    below: list[dict] = [{} for _ in range(n)]
    if strategy.vector_candidate_k:
        if query_vectors is None:
            raise ValueError("an attached knowledge base's vector leg needs the questions' vectors")
        vectors = np.asarray(query_vectors, dtype=np.float32)

        def search(indexes, limit: int, _exact: bool) -> list[list[LegHit]]:
            return _group(attached_sql.vector_leg(conn, names, [vectors[i] for i in indexes], limit), len(indexes))

        vector_hits = vector_cut.top_k(search, n, strategy.vector_candidate_k, lambda: 0, exact=True)
    if strategy.keyword_candidate_k:
        mode = attached.mapping.text_search
        k = strategy.keyword_candidate_k
        texts = [textsearch.prepare(mode, q) for q in queries]
        literals = None if targets is None else [_array_literal([str(t) for t in ts]) for ts in targets]
        rows = attached_sql.keyword_leg(conn, names, textsearch.regconfig(mode), texts, k, literals).all()
        if literals is None:
            keyword_hits = _group(rows, n)
        else:
            assert targets is not None
            for i, ts in enumerate(targets):
                below[i] = dict.fromkeys(map(str, ts))
            top = []
            for row in rows:
                if row.leg_rank <= k:
                    top.append(row)
                    below[row.query_index - 1].pop(row.chunk_id, None)
                else:
                    below[row.query_index - 1][row.chunk_id] = {"keyword_score": float(row.score),
                                                                "keyword_rank": int(row.leg_rank)}
            keyword_hits = _group(top, n)
    none = {"keyword_score": None, "keyword_rank": None}
    traces = []
    for i, question in enumerate(queries):
        trace = fuse_pool(question, vector_hits[i], keyword_hits[i], strategy, limits[i])
        traces.append(RetrievalTrace(trace.question, trace.candidates, trace.selected,
                                     {c: v or dict(none) for c, v in below[i].items()}))
    return traces
