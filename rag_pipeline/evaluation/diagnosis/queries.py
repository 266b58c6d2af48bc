"""The miss diagnosis's statements: a relevant chunk's own leg scores for the case's question, for all targets of
a batch at once (primary-key lookups of the targets), and on demand its exact global rank in each leg."""

from __future__ import annotations

import sqlalchemy as sa

from rag_pipeline.knowledge_base import textsearch
from rag_pipeline.retrieval import sql as retrieval_sql
from rag_pipeline.retrieval.bm25_sql import BM25_LEG_SQL, BM25_TARGETS_SCORE_SQL

_NO_LIMIT = 2_147_483_647
_TARGETS = "unnest(CAST(:t_ord AS int[]), CAST(:t_chunk AS uuid[])) AS t(ord, chunk_id)"


# On demand only (ranks=True): the exact rank costs one scan of the KB's vectors per target.
VECTOR_SCORE_SQL = f"""
SELECT t.ord, t.chunk_id::text AS chunk_id, s.score,
       1 + (SELECT count(*) FROM chunk_embeddings e2
            JOIN document_chunks c ON c.id = e2.chunk_id JOIN documents d ON d.id = c.document_id
            -- CASE: never compare vectors of another model (another dimension) whatever the plan
            CROSS JOIN LATERAL (SELECT CASE WHEN e2.model = :model THEN 1 - (e2.embedding <=> q.v) END AS score) o
            WHERE e2.model = :model AND {retrieval_sql.BASE_FILTERS}
              AND (o.score > s.score OR (o.score = s.score AND c.id < t.chunk_id))) AS rank
FROM {_TARGETS}
JOIN unnest(CAST(:query_vectors AS vector[])) WITH ORDINALITY AS q(v, ord) ON q.ord = t.ord
JOIN chunk_embeddings e ON e.chunk_id = t.chunk_id AND e.model = :model
CROSS JOIN LATERAL (SELECT 1 - (e.embedding <=> q.v) AS score) AS s
"""

VECTOR_SCORE_ONLY_SQL = f"""
SELECT t.ord, t.chunk_id::text AS chunk_id, s.score, NULL::bigint AS rank
FROM {_TARGETS}
JOIN unnest(CAST(:query_vectors AS vector[])) WITH ORDINALITY AS q(v, ord) ON q.ord = t.ord
JOIN chunk_embeddings e ON e.chunk_id = t.chunk_id AND e.model = :model
CROSS JOIN LATERAL (SELECT 1 - (e.embedding <=> q.v) AS score) AS s
"""


def keyword_rank_sql(scorer: str) -> str:
    """On demand only: the leg statement without its LIMIT, ranked, restricted to the targets (exact rank)."""
    leg = BM25_LEG_SQL if scorer == "bm25" else retrieval_sql.TS_RANK_CD_LEG_SQL
    return f"""
WITH leg AS ({leg}),
ranked AS (SELECT query_index, chunk_id, score,
                  row_number() OVER (PARTITION BY query_index ORDER BY score DESC, chunk_id) AS rank FROM leg)
SELECT t.ord, t.chunk_id::text AS chunk_id, r.score, r.rank
FROM {_TARGETS} JOIN ranked r ON r.query_index = t.ord AND r.chunk_id = t.chunk_id
"""


_TSQUERY = textsearch.OR_TSQUERY_SQL.replace(":qtext", "q.query_text")
# The ts_rank_cd leg's score of the target chunks only (retrieval_sql._TS_RANK_CD_MATCHES' expression).
KEYWORD_SCORE_SQL = f"""
SELECT t.ord, t.chunk_id::text AS chunk_id, CAST(ts_rank_cd(c.content_tsvector, tq.tsq, 32) AS float8) AS score,
       NULL::bigint AS rank
FROM {_TARGETS}
JOIN unnest(CAST(:query_texts AS text[])) WITH ORDINALITY AS q(query_text, ord) ON q.ord = t.ord
CROSS JOIN LATERAL (SELECT {_TSQUERY} AS tsq) AS tq
JOIN document_chunks c ON c.id = t.chunk_id
JOIN documents d ON d.id = c.document_id
WHERE c.content_tsvector @@ tq.tsq AND {retrieval_sql.BASE_FILTERS}
"""


def vector_scores(conn: sa.Connection, params: dict, *, ranks: bool) -> sa.CursorResult:
    """``ord, chunk_id, score, rank`` of the vector targets (``ranks``: with the exact global rank, else NULL)."""
    return conn.execute(sa.text(VECTOR_SCORE_SQL if ranks else VECTOR_SCORE_ONLY_SQL), params)


def keyword_scores(conn: sa.Connection, params: dict, *, scorer: str, ranks: bool) -> sa.CursorResult:
    """``ord, chunk_id, score, rank`` of the keyword targets under ``scorer`` (``ranks``: the exact global rank)."""
    if ranks:
        return conn.execute(sa.text(keyword_rank_sql(scorer)), {**params, "k": _NO_LIMIT})
    return conn.execute(sa.text(BM25_TARGETS_SCORE_SQL if scorer == "bm25" else KEYWORD_SCORE_SQL), params)
