"""The legs' SQL on an attached knowledge base (the user's tables, through a mapping: docs/evaluating.md, "Your own
retriever"): the statements of :mod:`rag_pipeline.retrieval.sql` with the mapping's quoted names
(:class:`~rag_pipeline.knowledge_base.queries.attached.Names`) in place of the project's tables. Same scores and
orders: ``1 - (embedding <=> question)``, ``ts_rank_cd(tsvector, OR-tsquery, 32)``, ties by chunk id."""

from __future__ import annotations

import sqlalchemy as sa

from rag_pipeline.knowledge_base import textsearch
from rag_pipeline.knowledge_base.queries.attached import Names

_TSQUERY = textsearch.OR_TSQUERY_SQL.replace(":qtext", "q.query_text")


def _vector_leg(n: Names) -> str:
    m = n.mapping
    assert m.embedding is not None
    emb = n.col(m.embedding)
    return f"""
SELECT q.ord AS query_index, hit.chunk_id, hit.document_id, hit.document_name, hit.score
FROM unnest(CAST(:query_vectors AS vector[])) WITH ORDINALITY AS q(query_vector, ord)
CROSS JOIN LATERAL (
    SELECT {n.chunk_id} AS chunk_id, {n.document_id} AS document_id, {n.document_name} AS document_name,
           1 - ({emb} <=> q.query_vector) AS score
    FROM {n.source}
    WHERE {emb} IS NOT NULL AND {n.scope} AND {n.searchable}
    ORDER BY {emb} <=> q.query_vector
    LIMIT :k
) AS hit
"""


def _keyword_matches(n: Names) -> str:
    return f"""
    SELECT {n.chunk_id} AS chunk_id, {n.document_id} AS document_id, {n.document_name} AS document_name,
           {n.col(n.mapping.chunk_id)} AS sort_key,
           CAST(ts_rank_cd({n.tsvector}, t.tsq, 32) AS float8) AS score
    FROM {n.source}
    WHERE {n.tsvector} @@ t.tsq AND {n.scope} AND {n.searchable}"""


def _keyword_leg(n: Names) -> str:
    return f"""
SELECT q.ord AS query_index, hit.chunk_id, hit.document_id, hit.document_name, hit.score
FROM unnest(CAST(:query_texts AS text[])) WITH ORDINALITY AS q(query_text, ord)
CROSS JOIN LATERAL (SELECT {_TSQUERY} AS tsq) AS t
CROSS JOIN LATERAL ({_keyword_matches(n)}
    ORDER BY score DESC, sort_key
    LIMIT :k
) AS hit
"""


def _keyword_targets_leg(n: Names) -> str:
    """The top :k plus the question's targets (``{id,...}`` text literals in :targets) wherever they rank."""
    return f"""
SELECT q.ord AS query_index, hit.chunk_id, hit.document_id, hit.document_name, hit.score, hit.leg_rank
FROM unnest(CAST(:query_texts AS text[]), CAST(:targets AS text[])) WITH ORDINALITY AS q(query_text, target_ids, ord)
CROSS JOIN LATERAL (SELECT {_TSQUERY} AS tsq) AS t
CROSS JOIN LATERAL (
    SELECT r.chunk_id, r.document_id, r.document_name, r.score, r.leg_rank
    FROM (
        SELECT s.*, row_number() OVER (ORDER BY s.score DESC, s.sort_key) AS leg_rank
        FROM ({_keyword_matches(n)}) AS s
    ) AS r
    WHERE r.leg_rank <= :k OR r.chunk_id = ANY(CAST(q.target_ids AS text[]))
) AS hit
"""


def vector_leg(conn: sa.Connection, names: Names, query_vectors: list, k: int) -> sa.CursorResult:
    return conn.execute(sa.text(_vector_leg(names)), {**names.params(), "query_vectors": query_vectors, "k": k})


def keyword_leg(conn: sa.Connection, names: Names, cfg: str, query_texts: list[str], k: int,
                targets: list[str] | None = None) -> sa.CursorResult:
    """The keyword leg's rows; with ``targets`` (one ``{id,...}`` literal per question) each row's ``leg_rank``
    and the targets ranked below :k."""
    params = {**names.params(), "cfg": cfg, "query_texts": query_texts, "k": k}
    if targets is None:
        return conn.execute(sa.text(_keyword_leg(names)), params)
    return conn.execute(sa.text(_keyword_targets_leg(names)), {**params, "targets": targets})
