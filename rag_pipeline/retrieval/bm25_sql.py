"""BM25 computed in PostgreSQL from the term statistics that ingestion keeps (``Postgres ts_rank`` is not BM25).

Inputs (kept by :mod:`rag_pipeline.knowledge_base.term_stats`, over the *searchable* chunks, docs/design.md §3.3):
``chunk_terms.tf``, ``knowledge_base_term_stats.doc_freq`` (df), ``knowledge_bases.chunk_count`` (N) and
``avg_chunk_length`` (avgdl), ``document_chunks.token_count`` (dl). Score (Lucene's non-negative idf, as Anserini)::

    idf(t)      = ln(1 + (N - df + 0.5) / (df + 0.5))
    score(q, d) = Σ_{t ∈ q}  idf(t) · tf · (k1 + 1) / (tf + k1 · (1 - b + b · dl / avgdl))

Query terms are the distinct lexemes of ``to_tsvector(regconfig, question)``, at most
``textsearch.MAX_QUERY_TERMS`` in question order, as the ts_rank_cd leg; the ``(k1 + 1)`` factor is kept (Lucene
>= 8 drops it: same ranking); tf saturates at 256 (Postgres positions); the sum is ordered (``ORDER BY lexeme``) so
a batch and a single question score bit-identically. Each query term is two primary-key lookups (a scalar df
subquery, a ``LATERAL ... OFFSET 0`` postings subquery) so a not-yet-analysed KB cannot get a cross-join plan.
Evaluation runs use :mod:`rag_pipeline.retrieval.bm25_index` (the same results in memory); this SQL is the
reference and the path of single searches."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from rag_pipeline.knowledge_base import textsearch
from rag_pipeline.retrieval.sql import BASE_FILTERS

_QUERY_TERMS = """query_terms AS MATERIALIZED (
    SELECT q.ord, t.lexeme,
           (SELECT s.doc_freq
            FROM knowledge_base_term_stats s
            WHERE s.knowledge_base_id = :kb AND s.lexeme = t.lexeme) AS df
    FROM unnest(CAST(:query_texts AS text[])) WITH ORDINALITY AS q(query_text, ord)
    CROSS JOIN LATERAL (  -- textsearch.QUERY_LEXEMES_SQL: at most MAX_QUERY_TERMS, as the ts_rank_cd leg
    SELECT u.lexeme, u.i
    FROM unnest(to_tsvector(CAST(:cfg AS regconfig), q.query_text)) WITH ORDINALITY AS u(lexeme, positions, weights, i)
    ORDER BY u.positions[1], u.i
    LIMIT 64
) AS t
),
"""

# N and avgdl of the knowledge base, the statistics every BM25 statement reads.
_KB_STATS = """kb AS (
    SELECT CAST(chunk_count AS float8) AS n, avg_chunk_length AS avgdl
    FROM knowledge_bases
    WHERE id = :kb
)"""

_BM25_SQL = f"""
WITH {_QUERY_TERMS}
{_KB_STATS},
postings AS (
    SELECT qt.ord, qt.lexeme, p.chunk_id, p.tf,
           ln(1 + (kb.n - qt.df + 0.5) / (CAST(qt.df AS float8) + 0.5)) AS idf
    FROM query_terms qt
    CROSS JOIN kb
    CROSS JOIN LATERAL (
        SELECT ct.chunk_id, ct.tf
        FROM chunk_terms ct
        WHERE ct.knowledge_base_id = :kb AND ct.lexeme = qt.lexeme
        OFFSET 0  -- keep the per-term index lookup whatever the table statistics say
    ) AS p
    WHERE qt.df IS NOT NULL
),
scores AS (
    SELECT p.ord, p.chunk_id,
           sum(p.idf * p.tf * (CAST(:k1 AS float8) + 1)
               / (p.tf + CAST(:k1 AS float8)
                  * (1 - CAST(:b AS float8) + CAST(:b AS float8) * c.token_count / kb.avgdl))
               ORDER BY p.lexeme) AS score
    FROM postings p
    JOIN document_chunks c ON c.id = p.chunk_id
    CROSS JOIN kb
    GROUP BY p.ord, p.chunk_id
),
ranked AS (
    SELECT s.ord, s.chunk_id, c.document_id, d.original_name AS document_name, s.score,
           row_number() OVER (PARTITION BY s.ord ORDER BY s.score DESC, s.chunk_id) AS leg_rank
    FROM scores s
    JOIN document_chunks c ON c.id = s.chunk_id
    JOIN documents d ON d.id = c.document_id
    WHERE {BASE_FILTERS}
)
SELECT ord AS query_index, chunk_id, document_id, document_name, score{{extra}}
FROM ranked
WHERE {{where}}
"""

BM25_LEG_SQL = _BM25_SQL.format(extra="", where="leg_rank <= :k")

# With targets (see retrieval_sql.TS_RANK_CD_TARGETS_LEG_SQL): the top :k plus the relevant chunks
# (one ``{uuid,...}`` literal per question in :targets) wherever they rank, each row with its leg_rank.
BM25_TARGETS_LEG_SQL = _BM25_SQL.format(
    extra=", leg_rank",
    where="leg_rank <= :k OR chunk_id = ANY(CAST((CAST(:targets AS text[]))[CAST(ord AS int)] AS uuid[]))")

# Miss diagnosis: the leg's score of given chunks only (:t_ord, :t_chunk: the question's 1-based position and a
# chunk id, one pair per target), by primary-key lookups, summed as above: the same float8 the leg computes. No
# row: the chunk holds no query term (or is not searchable).
BM25_TARGETS_SCORE_SQL = f"""
WITH {_QUERY_TERMS}
{_KB_STATS}
SELECT t.ord, t.chunk_id::text AS chunk_id, NULL::bigint AS rank,
       sum(ln(1 + (kb.n - qt.df + 0.5) / (CAST(qt.df AS float8) + 0.5)) * ct.tf * (CAST(:k1 AS float8) + 1)
           / (ct.tf + CAST(:k1 AS float8)
              * (1 - CAST(:b AS float8) + CAST(:b AS float8) * c.token_count / kb.avgdl))
           ORDER BY qt.lexeme) AS score
FROM unnest(CAST(:t_ord AS int[]), CAST(:t_chunk AS uuid[])) AS t(ord, chunk_id)
JOIN query_terms qt ON qt.ord = t.ord AND qt.df IS NOT NULL
CROSS JOIN kb
JOIN chunk_terms ct ON ct.knowledge_base_id = :kb AND ct.lexeme = qt.lexeme AND ct.chunk_id = t.chunk_id
JOIN document_chunks c ON c.id = t.chunk_id
JOIN documents d ON d.id = c.document_id
WHERE {BASE_FILTERS}
GROUP BY t.ord, t.chunk_id
"""


# The in-memory leg's inputs (:mod:`rag_pipeline.retrieval.bm25_index`): the same rows as the statements above.
_CHUNKS_SQL = f"""
SELECT c.id::text AS chunk_id, uuid_send(c.id) AS key, c.document_id::text AS document_id,
       d.original_name AS document_name, c.token_count
FROM document_chunks c JOIN documents d ON d.id = c.document_id
WHERE {BASE_FILTERS}
ORDER BY c.id
"""

# idf with the SQL leg's expression (above), evaluated by the server: same float8 bits.
_TERMS_SQL = """
SELECT s.lexeme, s.doc_freq, ln(1 + (kb.n - s.doc_freq + 0.5) / (CAST(s.doc_freq AS float8) + 0.5)) AS idf
FROM knowledge_base_term_stats s
CROSS JOIN (SELECT CAST(chunk_count AS float8) AS n FROM knowledge_bases WHERE id = :kb) AS kb
WHERE s.knowledge_base_id = :kb
ORDER BY s.lexeme
"""

# The KB's postings of the lexemes in [:first, :after) (NULL: open end), one row per lexeme in primary-key order
# (an index scan): chunk ids as 16-byte uuid_send + big-endian int32 tf, decoded by numpy; postings of chunks
# that are not searchable (and lexemes without a df) are dropped on the client.
_POSTINGS_SQL = """
SELECT ct.lexeme, count(*) AS n, string_agg(uuid_send(ct.chunk_id) || int4send(ct.tf), ''::bytea) AS data
FROM chunk_terms ct
WHERE ct.knowledge_base_id = :kb
  AND (CAST(:first AS text) IS NULL OR ct.lexeme >= :first)
  AND (CAST(:after AS text) IS NULL OR ct.lexeme < :after)
GROUP BY ct.lexeme
"""

_KB_SQL = "SELECT CAST(chunk_count AS float8) AS n, avg_chunk_length AS avgdl FROM knowledge_bases WHERE id = :kb"

# The question's lexemes exactly as the SQL leg takes them (textsearch.QUERY_LEXEMES_SQL, per question of a batch).
_LEXEMES = textsearch.QUERY_LEXEMES_SQL.replace(":qtext", "q.query_text")
if _LEXEMES == textsearch.QUERY_LEXEMES_SQL:  # pragma: no cover - guards a change in textsearch
    raise RuntimeError("textsearch.QUERY_LEXEMES_SQL no longer uses the :qtext parameter")
QUERY_LEXEMES_BATCH_SQL = f"""
SELECT q.ord AS query_index, t.lexeme
FROM unnest(CAST(:query_texts AS text[])) WITH ORDINALITY AS q(query_text, ord)
CROSS JOIN LATERAL {_LEXEMES} AS t
"""


def bm25_params(k1: float, b: float) -> dict[str, float]:
    """The bind parameters of :data:`BM25_LEG_SQL` besides the questions, KB, config and k."""
    if k1 < 0 or not 0.0 <= b <= 1.0:
        raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
    return {"k1": float(k1), "b": float(b)}


def index_inputs(conn: sa.Connection, kb_id) -> tuple[sa.Row, Sequence[sa.Row], Sequence[sa.Row]]:
    """N and avgdl (``n``, ``avgdl``) of the KB; its searchable chunks in chunk-id order (id as text and 16-byte
    key, document, token count); every lexeme's ``doc_freq`` and ``idf``, in lexeme order."""
    params = {"kb": kb_id}
    return (conn.execute(sa.text(_KB_SQL), params).one(), conn.execute(sa.text(_CHUNKS_SQL), params).all(),
            conn.execute(sa.text(_TERMS_SQL), params).all())


def searchable_postings(conn: sa.Connection, kb_id) -> int:
    """How many postings the in-memory keyword index of the KB holds (the searchable chunks' distinct lexemes:
    the sum of the term statistics' document frequencies)."""
    return int(conn.execute(sa.text("SELECT coalesce(sum(doc_freq), 0) FROM knowledge_base_term_stats "
                                    "WHERE knowledge_base_id = :kb"), {"kb": kb_id}).scalar_one())


def postings(conn: sa.Connection, kb_id, first: str | None, after: str | None,
             yield_per: int) -> sa.CursorResult:
    """The KB's postings of the lexemes in ``[first, after)``, one row per lexeme (see :data:`_POSTINGS_SQL`), from a
    server-side cursor, ``.partitions(yield_per)`` (the driver does not hold the whole range beside the rows)."""
    return conn.execute(sa.text(_POSTINGS_SQL), {"kb": kb_id, "first": first, "after": after},
                        execution_options={"yield_per": yield_per})


def query_lexemes(conn: sa.Connection, cfg: str, query_texts: Sequence[str]) -> sa.CursorResult:
    """``(query_index, lexeme)`` of each question of a batch, as the SQL leg takes them."""
    return conn.execute(sa.text(QUERY_LEXEMES_BATCH_SQL), {"cfg": cfg, "query_texts": list(query_texts)})
