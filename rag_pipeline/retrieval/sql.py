"""The retrieval stage's SQL (docs/design.md §3.1): the two legs written out in full, the stages' score look-ups
and the strategy registry; thin functions run them on the caller's connection.

Every leg statement takes a batch of questions (``unnest(:array) WITH ORDINALITY``, a ``CROSS JOIN LATERAL`` search
each, rows carrying ``query_index``). The only text spliced in is the embedding dimension (an ``int``), which must
match the partial HNSW index for it to be used."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import sqlalchemy as sa

from rag_pipeline.knowledge_base import textsearch
from rag_pipeline.knowledge_base.queries.documents import SEARCHABLE_DOCUMENT_SQL
from rag_pipeline.storage.engine import driver_connection
from rag_pipeline.storage.queries import MODEL_DIMENSION_SQL, model_dimension  # noqa: F401 - the legs' dimension

BASE_FILTERS = f"""c.knowledge_base_id = :kb
          AND c.is_current
          AND {SEARCHABLE_DOCUMENT_SQL}"""

# Per transaction (``set_config(..., true)`` is ``SET LOCAL``): the HNSW candidate list size, pgvector 0.8
# iterative index scans in exact distance order, and custom plans so the partial index predicate
# ``model = '<name>'`` matches the actual :model value even in a prepared statement.
VECTOR_SETTINGS_SQL = """
SELECT set_config('hnsw.ef_search', CAST(:ef_search AS text), true),
       set_config('hnsw.iterative_scan', 'strict_order', true),
       set_config('plan_cache_mode', 'force_custom_plan', true)
"""

# Vector leg. ``<=>`` is pgvector's cosine distance; vector_score = 1 - distance, ORDER BY the bare distance so
# the HNSW index delivers the order; :k is the *fetch* limit of retrieval.vector_cut. The inner query walks the KB ×
# model's partial index alone and checks each visited vector's chunk is searchable by a sub-select (a join makes
# the planner misestimate and exact-scan a small KB: bench/RESULTS.md, "Vector statement"); the document columns
# are joined to the k rows afterwards. The ids are returned as text, the form a hit carries them in.
VECTOR_LEG_SQL = """
SELECT q.ord AS query_index, CAST(hit.chunk_id AS text) AS chunk_id, CAST(c.document_id AS text) AS document_id,
       d.original_name AS document_name, hit.score
FROM unnest(CAST(:query_vectors AS vector[])) WITH ORDINALITY AS q(query_vector, ord)
CROSS JOIN LATERAL (
    SELECT e.chunk_id, 1 - (e.embedding::vector({dim}) <=> q.query_vector) AS score
    FROM chunk_embeddings e
    WHERE e.model = :model
      AND e.knowledge_base_id = :kb
      AND (SELECT true FROM document_chunks c JOIN documents d ON d.id = c.document_id
           WHERE c.id = e.chunk_id AND {filters})
    ORDER BY e.embedding::vector({dim}) <=> q.query_vector
    LIMIT :k
) AS hit
JOIN document_chunks c ON c.id = hit.chunk_id
JOIN documents d ON d.id = c.document_id
"""

# The same walk without the searchability check and the document join, for a caller that holds the knowledge base's
# searchable chunks with their documents already (an in-memory keyword index read in the same snapshot): the rows
# are the walk's first :k, searchable or not. Where all of a question's rows are searchable they are the rows of
# VECTOR_LEG_SQL (the check only skips rows; the walk's order does not depend on it); search._vector_leg asks
# VECTOR_LEG_SQL for the other questions.
VECTOR_WALK_SQL = """
SELECT q.ord AS query_index, CAST(hit.chunk_id AS text) AS chunk_id, hit.score
FROM unnest(CAST(%(query_vectors)s AS vector[])) WITH ORDINALITY AS q(query_vector, ord)
CROSS JOIN LATERAL (
    SELECT e.chunk_id, 1 - (e.embedding::vector({dim}) <=> q.query_vector) AS score
    FROM chunk_embeddings e
    WHERE e.model = %(model)s
      AND e.knowledge_base_id = %(kb)s
    ORDER BY e.embedding::vector({dim}) <=> q.query_vector
    LIMIT %(k)s
) AS hit
"""

# The exact search (the fallback when an index scan gave up early): the same rows by a scan of the KB's
# searchable vectors, ordered by the plain column ``e.embedding``, which no index matches (same distances).
VECTOR_LEG_EXACT_SQL = """
SELECT q.ord AS query_index, CAST(hit.chunk_id AS text) AS chunk_id, CAST(hit.document_id AS text) AS document_id,
       hit.document_name, hit.score
FROM unnest(CAST(:query_vectors AS vector[])) WITH ORDINALITY AS q(query_vector, ord)
CROSS JOIN LATERAL (
    SELECT c.id AS chunk_id, c.document_id, d.original_name AS document_name,
           1 - (e.embedding::vector({dim}) <=> q.query_vector) AS score
    FROM chunk_embeddings e
    JOIN document_chunks c ON c.id = e.chunk_id
    JOIN documents d ON d.id = c.document_id
    WHERE e.model = :model
      AND e.knowledge_base_id = :kb
      AND {filters}
    ORDER BY e.embedding <=> q.query_vector
    LIMIT :k
) AS hit
"""

# The question's OR-tsquery (textsearch.OR_TSQUERY_SQL: the lexemes of to_tsvector(:cfg, text),
# each quoted, joined with |), computed once per question of the batch.
_TSQUERY = textsearch.OR_TSQUERY_SQL.replace(":qtext", "q.query_text")
if _TSQUERY == textsearch.OR_TSQUERY_SQL:  # pragma: no cover - guards a change in textsearch
    raise RuntimeError("textsearch.OR_TSQUERY_SQL no longer uses the :qtext parameter")

# Every searchable chunk matching the question's OR-tsquery ``t.tsq``, with its ts_rank_cd keyword score (hybrid-v1):
# ts_rank_cd(tsvector, query, 32) = rank / (rank + 1), a float4 in [0, 1). Used by both keyword legs below.
_TS_RANK_CD_MATCHES = f"""
    SELECT c.id AS chunk_id, c.document_id, d.original_name AS document_name,
           CAST(ts_rank_cd(c.content_tsvector, t.tsq, 32) AS float8) AS score
    FROM document_chunks c
    JOIN documents d ON d.id = c.document_id
    WHERE c.content_tsvector @@ t.tsq
      AND {BASE_FILTERS}"""

# Keyword leg, hybrid-v1's scorer: the top :k matches. A question without lexemes has a NULL tsquery and matches
# nothing.
TS_RANK_CD_LEG_SQL = f"""
SELECT q.ord AS query_index, hit.chunk_id, hit.document_id, hit.document_name, hit.score
FROM unnest(CAST(:query_texts AS text[])) WITH ORDINALITY AS q(query_text, ord)
CROSS JOIN LATERAL (SELECT {_TSQUERY} AS tsq) AS t
CROSS JOIN LATERAL ({_TS_RANK_CD_MATCHES}
    ORDER BY score DESC, c.id
    LIMIT :k
) AS hit
"""

# Keyword leg with *targets* (evaluation: the case's relevant chunk ids, one ``{uuid,...}`` literal per question):
# TS_RANK_CD_LEG_SQL's scores and order, every match ranked (row_number over score desc, chunk id), the rows kept
# the top :k *plus* any target ranked lower (miss diagnosis for one full sort instead of a top-N heapsort, no second
# pass). Rows with leg_rank <= :k are exactly TS_RANK_CD_LEG_SQL's rows.
TS_RANK_CD_TARGETS_LEG_SQL = f"""
SELECT q.ord AS query_index, hit.chunk_id, hit.document_id, hit.document_name, hit.score, hit.leg_rank
FROM unnest(CAST(:query_texts AS text[]), CAST(:targets AS text[])) WITH ORDINALITY AS q(query_text, target_ids, ord)
CROSS JOIN LATERAL (SELECT {_TSQUERY} AS tsq) AS t
CROSS JOIN LATERAL (
    SELECT r.chunk_id, r.document_id, r.document_name, r.score, r.leg_rank
    FROM (
        SELECT s.*, row_number() OVER (ORDER BY s.score DESC, s.chunk_id) AS leg_rank
        FROM ({_TS_RANK_CD_MATCHES}) AS s
    ) AS r
    WHERE r.leg_rank <= :k OR r.chunk_id = ANY(CAST(q.target_ids AS uuid[]))
) AS hit
"""

KNOWLEDGE_BASE_SQL = "SELECT id, name, text_search, chunk_count, avg_chunk_length FROM knowledge_bases WHERE id = :kb"

# The stored vectors' similarity to each question for the listed chunks (one ``{uuid,...}`` literal per
# question): the vector leg's own score expression, so a completed score equals the leg's score bit for bit.
# {dim} is the model's integer dimension (as in the vector leg's SQL).
VECTOR_SCORES_SQL = """
SELECT q.ord AS query_index, e.chunk_id, 1 - (e.embedding::vector({dim}) <=> q.query_vector) AS score
FROM unnest(CAST(:query_vectors AS vector[]), CAST(:chunk_ids AS text[])) WITH ORDINALITY
     AS q(query_vector, chunk_ids, ord)
JOIN chunk_embeddings e ON e.chunk_id = ANY(CAST(q.chunk_ids AS uuid[]))
WHERE e.model = :model AND e.knowledge_base_id = :kb
"""


def vector_leg_sql(dimension: int, *, exact: bool = False) -> str:
    """:data:`VECTOR_LEG_SQL` for a model of ``dimension`` (the int the HNSW index was built with);
    ``exact=True``: :data:`VECTOR_LEG_EXACT_SQL`, ordered by an expression the index cannot serve."""
    return (VECTOR_LEG_EXACT_SQL if exact else VECTOR_LEG_SQL).format(dim=int(dimension), filters=BASE_FILTERS)


def vector_walk_sql(dimension: int) -> str:
    """:data:`VECTOR_WALK_SQL` for a model of ``dimension``."""
    return VECTOR_WALK_SQL.format(dim=int(dimension))


def knowledge_base(conn: sa.Connection, kb_id) -> sa.Row | None:
    """The KB row a search needs (id, name, text_search, chunk_count, avg_chunk_length)."""
    return conn.execute(sa.text(KNOWLEDGE_BASE_SQL), {"kb": kb_id}).first()


def has_embeddings(conn: sa.Connection, kb_id, model: str) -> bool:
    """Does the knowledge base hold vectors of this model (any current chunk)? Uses the chunk index + PK."""
    return bool(conn.execute(sa.text(
        "SELECT EXISTS (SELECT 1 FROM document_chunks c JOIN chunk_embeddings e ON e.chunk_id = c.id "
        "AND e.model = :model WHERE c.knowledge_base_id = :kb AND c.is_current)"),
        {"kb": kb_id, "model": model}).scalar_one())


def set_statement_timeout(conn: sa.Connection, milliseconds: int) -> None:
    """``SET LOCAL``: the statements that follow in the caller's transaction (its miss diagnosis) share the bound."""
    conn.execute(sa.text("SELECT set_config('statement_timeout', :timeout, true)"), {"timeout": f"{milliseconds}ms"})


def set_vector_settings(conn: sa.Connection, ef_search: int) -> None:
    conn.execute(sa.text(VECTOR_SETTINGS_SQL), {"ef_search": ef_search})


def vector_leg(conn: sa.Connection, dimension: int, params: dict, *, exact: bool = False) -> sa.CursorResult:
    return conn.execute(sa.text(vector_leg_sql(dimension, exact=exact)), params)


def vector_walk(conn: sa.Connection, dimension: int, params: dict) -> list[tuple[int, str, float]]:
    """The rows of :data:`VECTOR_WALK_SQL` as plain tuples ``(query_index, chunk_id, score)``, on the driver's own
    cursor of ``conn``'s transaction (a walk returns some 130 rows a question; no row objects are built)."""
    statement = vector_walk_sql(dimension)
    try:
        with driver_connection(conn).cursor() as cursor:
            return cursor.execute(statement, params).fetchall()
    except psycopg.OperationalError as exc:  # as SQLAlchemy raises it (a cancelled statement: its timeout, 57014)
        raise sa.exc.OperationalError(statement, params, exc) from exc


def searchable_vectors(conn: sa.Connection, kb_id, model: str) -> int:
    """How many vectors of the model the KB can return (bounds what a complete vector leg must deliver)."""
    return conn.execute(sa.text(
        "SELECT count(*) FROM chunk_embeddings e JOIN document_chunks c ON c.id = e.chunk_id "
        "JOIN documents d ON d.id = c.document_id WHERE e.model = :model AND e.knowledge_base_id = :kb "
        f"AND {BASE_FILTERS}"), {"kb": kb_id, "model": model}).scalar_one()


def searchable_vector_chunks(conn: sa.Connection, kb_id, model: str) -> sa.CursorResult:
    """``chunk_id, document_id, document_name`` of the KB's searchable vectors of the model, in chunk-id order: the
    in-memory exact leg's rows (retrieval.dense_index), whose vectors :func:`vector_copy` streams."""
    return conn.execute(sa.text(
        "SELECT c.id::text AS chunk_id, c.document_id::text AS document_id, d.original_name AS document_name "
        "FROM chunk_embeddings e JOIN document_chunks c ON c.id = e.chunk_id "
        "JOIN documents d ON d.id = c.document_id WHERE e.model = :model AND e.knowledge_base_id = :kb "
        f"AND {BASE_FILTERS} ORDER BY c.id"), {"kb": kb_id, "model": model})


# Every vector of the KB × model as ``COPY ... (FORMAT BINARY)`` rows (uuid, vector): in the table's order, unsorted
# and unjoined, so the server streams them as it reads them. psycopg binds the two values client-side (COPY takes
# no server-side parameters).
VECTOR_COPY_SQL = """
COPY (SELECT e.chunk_id, e.embedding FROM chunk_embeddings e
      WHERE e.model = %(model)s AND e.knowledge_base_id = %(kb)s) TO STDOUT (FORMAT BINARY)
"""


def vector_copy(conn: sa.Connection, kb_id, model: str) -> Iterator[bytes | bytearray | memoryview]:
    """The binary COPY data of :data:`VECTOR_COPY_SQL` on ``conn``'s transaction, as the server sends it."""
    with driver_connection(conn).cursor() as cursor, cursor.copy(VECTOR_COPY_SQL,
                                                                {"kb": str(kb_id), "model": model}) as copy:
        yield from copy


def keyword_leg(conn: sa.Connection, statement: str, params: dict) -> sa.CursorResult:
    """The rows of one of the keyword-leg statements (``TS_RANK_CD_*_LEG_SQL``, ``bm25_sql.BM25_*_LEG_SQL``)."""
    return conn.execute(sa.text(statement), params)


def stored_vector_scores(conn: sa.Connection, dimension: int, params: dict) -> sa.CursorResult:
    return conn.execute(sa.text(VECTOR_SCORES_SQL.format(dim=int(dimension))), params)


def chunk_texts(conn: sa.Connection, ids_literal: str) -> dict[str, str]:
    """``{chunk id: text}`` of the chunks in ``ids_literal`` (a ``{uuid,...}`` array literal)."""
    return {str(r.id): r.content for r in conn.execute(sa.text(
        "SELECT id, content FROM document_chunks WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": ids_literal})}


def record_strategy(conn: sa.Connection, version: str, params_hash: str, params_json: str) -> sa.Row:
    """Insert the version's row unless it exists, then read back the stored ``(params_hash, params)``."""
    conn.execute(sa.text("INSERT INTO retrieval_strategies (version, params_hash, params) VALUES (:version, "
                         ":params_hash, CAST(:params AS jsonb)) ON CONFLICT (version) DO NOTHING"),
                 {"version": version, "params_hash": params_hash, "params": params_json})
    return conn.execute(sa.text("SELECT params_hash, params FROM retrieval_strategies WHERE version = :version"),
                        {"version": version}).one()
