"""SQL of the BM25 term statistics (:mod:`rag_pipeline.knowledge_base.term_stats` says when each statement runs)."""

from __future__ import annotations

import sqlalchemy as sa

from rag_pipeline.knowledge_base.queries.documents import SEARCHABLE_DOCUMENT_SQL

_SEARCHABLE_CHUNKS = (f"document_chunks c JOIN documents d ON d.id = c.document_id "
                      f"WHERE c.knowledge_base_id = :kb AND c.is_current AND {SEARCHABLE_DOCUMENT_SQL}")

_N_AND_AVGDL = (f"SELECT count(*) AS n, CAST(coalesce(avg(c.token_count), 0) AS float8) AS avg_len "
                f"FROM {_SEARCHABLE_CHUNKS}")

_DELTA = "term_stats_delta"

_REBUILD_SQL = (
    "INSERT INTO knowledge_base_term_stats (knowledge_base_id, lexeme, doc_freq) "
    "SELECT ct.knowledge_base_id, ct.lexeme, count(*) FROM chunk_terms ct "
    "JOIN document_chunks c ON c.id = ct.chunk_id JOIN documents d ON d.id = c.document_id "
    f"WHERE ct.knowledge_base_id = :kb AND c.is_current AND {SEARCHABLE_DOCUMENT_SQL} "
    "GROUP BY ct.knowledge_base_id, ct.lexeme")

_CONSISTENT_SQL = (f"SELECT k.chunk_count = s.n AND k.avg_chunk_length = s.avg_len "
                   f"FROM knowledge_bases k, ({_N_AND_AVGDL}) s WHERE k.id = :kb")

# Per lexeme, the searchable chunks of the documents :docs, multiplied by :sign, added into the delta table.
_ADD_DOCUMENTS_SQL = (
    f"INSERT INTO {_DELTA} (lexeme, d) SELECT ct.lexeme, CAST(:sign AS int) * count(*) FROM chunk_terms ct "
    f"JOIN document_chunks c ON c.id = ct.chunk_id JOIN documents d ON d.id = c.document_id "
    f"WHERE ct.knowledge_base_id = :kb AND c.document_id = ANY(:docs) AND c.is_current AND {SEARCHABLE_DOCUMENT_SQL} "
    f"GROUP BY ct.lexeme ON CONFLICT (lexeme) DO UPDATE SET d = {_DELTA}.d + EXCLUDED.d")

_APPLY_DELTA_SQL = (
    "INSERT INTO knowledge_base_term_stats AS s (knowledge_base_id, lexeme, doc_freq) "
    f"SELECT :kb, lexeme, d FROM {_DELTA} WHERE d <> 0 "
    "ON CONFLICT (knowledge_base_id, lexeme) DO UPDATE SET doc_freq = s.doc_freq + EXCLUDED.doc_freq")

_DROP_EMPTY_SQL = (
    "DELETE FROM knowledge_base_term_stats WHERE knowledge_base_id = :kb AND doc_freq <= 0 "
    f"AND lexeme IN (SELECT lexeme FROM {_DELTA} WHERE d < 0) RETURNING doc_freq < 0")

_UPDATE_N_AND_AVGDL_SQL = (f"UPDATE knowledge_bases k SET chunk_count = s.n, avg_chunk_length = s.avg_len "
                           f"FROM ({_N_AND_AVGDL}) s WHERE k.id = :kb")


def analyze_searchable_tables(conn: sa.Connection) -> None:
    """Planner statistics of the tables the statistics queries join, counting this transaction's own new rows (a
    bulk ingestion's: without them the planner takes the new chunks for a handful and joins row by row)."""
    conn.execute(sa.text("ANALYZE documents, document_chunks, chunk_terms"))


def refresh_term_stats(conn: sa.Connection, kb_id) -> None:
    """Every statistic of the KB from its searchable chunks (linear in the KB's postings)."""
    conn.execute(sa.text("DELETE FROM knowledge_base_term_stats WHERE knowledge_base_id = :kb"), {"kb": kb_id})
    conn.execute(sa.text(_REBUILD_SQL), {"kb": kb_id})
    update_n_and_avgdl(conn, kb_id)


def update_n_and_avgdl(conn: sa.Connection, kb_id) -> None:
    conn.execute(sa.text(_UPDATE_N_AND_AVGDL_SQL), {"kb": kb_id})


def lock_statistics(conn: sa.Connection, kb_id) -> bool | None:
    """``FOR NO KEY UPDATE`` of the KB row (one change of its statistics at a time; readers are not blocked),
    then, in its own statement (seeing what committed while it waited), whether they match its searchable chunks."""
    conn.execute(sa.text("SELECT 1 FROM knowledge_bases WHERE id = :kb FOR NO KEY UPDATE"), {"kb": kb_id})
    return conn.execute(sa.text(_CONSISTENT_SQL), {"kb": kb_id}).scalar()


def start_delta(conn: sa.Connection, kb_id, document_ids: list) -> None:
    """A delta table holding − the documents' searchable chunks, per lexeme (as they are before the change)."""
    conn.execute(sa.text(f"CREATE TEMP TABLE IF NOT EXISTS {_DELTA} (lexeme text PRIMARY KEY, d bigint NOT NULL) "
                         "ON COMMIT DROP"))
    conn.execute(sa.text(f"TRUNCATE {_DELTA}"))
    conn.execute(sa.text(_ADD_DOCUMENTS_SQL), {"kb": kb_id, "docs": document_ids, "sign": -1})


def apply_delta(conn: sa.Connection, kb_id, document_ids: list) -> bool:
    """Add the documents' searchable chunks as they are now to the delta, the delta to ``doc_freq``, drop lexemes
    left at 0 and the delta; whether a ``doc_freq`` went below 0."""
    conn.execute(sa.text(_ADD_DOCUMENTS_SQL), {"kb": kb_id, "docs": document_ids, "sign": 1})
    conn.execute(sa.text(_APPLY_DELTA_SQL), {"kb": kb_id})
    negative = conn.execute(sa.text(_DROP_EMPTY_SQL), {"kb": kb_id}).scalars().all()
    conn.execute(sa.text(f"DROP TABLE {_DELTA}"))
    return any(negative)
