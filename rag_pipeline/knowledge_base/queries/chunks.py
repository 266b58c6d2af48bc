"""SQL of chunks: the searchable chunks a labeller browses, chunks by id, spans, and writing and retiring chunks."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import sqlalchemy as sa

from rag_pipeline.knowledge_base.queries.documents import SEARCHABLE_DOCUMENT_SQL
from rag_pipeline.storage.engine import driver_connection

_COLUMNS = ("c.id, c.document_id, d.original_name, c.ordinal, c.char_start, c.char_end, c.content, c.is_current, "
            "c.knowledge_base_id")
_SEARCHABLE = f"c.knowledge_base_id = :kb AND c.is_current AND {SEARCHABLE_DOCUMENT_SQL}"
_ORDER = "d.original_name, c.ordinal, c.char_start, c.id"

_FROM = "FROM document_chunks c JOIN documents d ON d.id = c.document_id"
_IN_SCOPE = f"WHERE {_SEARCHABLE} AND (CAST(:doc AS uuid) IS NULL OR c.document_id = CAST(:doc AS uuid))"
_LIST_SQL = f"SELECT {_COLUMNS} {_FROM} {_IN_SCOPE} ORDER BY {_ORDER} LIMIT :limit"
_COUNT_SQL = f"SELECT count(*) {_FROM} {_IN_SCOPE}"
# Case-insensitive substring (strpos: no LIKE wildcards to escape); works for any script, jieba or not.
_PHRASE_SQL = (f"SELECT {_COLUMNS} {_FROM} {_IN_SCOPE} AND strpos(lower(c.content), lower(:phrase)) > 0 "
               f"ORDER BY {_ORDER} LIMIT :limit")
_BY_IDS_SQL = f"SELECT {_COLUMNS} {_FROM} WHERE c.id = ANY(:ids)"
_DOCUMENT_NAMES_SQL = "SELECT original_name FROM documents WHERE knowledge_base_id = :kb ORDER BY original_name"
_NAMED_DOCUMENT_CHUNKS_SQL = (f"SELECT {_COLUMNS} {_FROM} WHERE {_SEARCHABLE} AND d.original_name = :name "
                              "ORDER BY c.ordinal, c.id")

_TARGET_DOCS_SQL = (f"SELECT d.id, d.original_name, d.content, ({SEARCHABLE_DOCUMENT_SQL}) AS searchable "
                    "FROM documents d WHERE d.knowledge_base_id = :kb AND d.original_name = ANY(:names)")
_CURRENT_SPANS_SQL = ("SELECT id, document_id, ordinal, char_start, char_end FROM document_chunks "
                      "WHERE document_id = ANY(:docs) AND is_current ORDER BY char_start, id")

_STAGE_SQL = ("CREATE TEMP TABLE IF NOT EXISTS chunk_stage (id uuid, document_id uuid, ordinal int, content text, "
              "content_hash text, char_start int, char_end int, ts_text text) ON COMMIT DROP")
# A lexeme's tf: its number of positions, coalesce(array_length(t.positions, 1), 1) (a tsvector keeps at most 256);
# a chunk's token_count: the sum of its tf. A new chunk gets it with its row; a revived one (ON CONFLICT) keeps the
# one of the same tsvector.
_INSERT_STAGED_SQL = (
    "INSERT INTO document_chunks (id, knowledge_base_id, document_id, ordinal, content, content_hash, "
    "char_start, char_end, content_tsvector, token_count, is_current) "
    "SELECT s.id, :kb, s.document_id, s.ordinal, s.content, s.content_hash, s.char_start, s.char_end, v.tsv, "
    "(SELECT coalesce(sum(coalesce(array_length(t.positions, 1), 1)), 0) FROM unnest(v.tsv) t), true "
    "FROM chunk_stage s, LATERAL (SELECT to_tsvector(CAST(:cfg AS regconfig), s.ts_text) AS tsv) v "
    "WHERE NOT EXISTS (SELECT 1 FROM document_chunks d WHERE d.id = s.id AND d.is_current) "
    "ON CONFLICT (id) DO UPDATE SET is_current = true, replaced_at = NULL, ordinal = EXCLUDED.ordinal RETURNING id")
# BM25 postings from the very lexemes of the tsvector. A chunk written here has none: a new one never had any, and
# retiring a chunk deletes its postings; the DELETE before keeps that true for a database written otherwise, and is
# what lets the INSERT go without ON CONFLICT (a third cheaper per posting: no speculative insertion). The rows go
# in primary-key order: the key's pages are then filled one after the other instead of at random (in chunk order a
# large ingestion split and rewrote pages all over an index larger than shared_buffers, and wrote each one to the
# WAL again after every checkpoint), and a lexeme's postings lie together in the table.
_DELETE_POSTINGS_SQL = "DELETE FROM chunk_terms WHERE chunk_id = ANY(:ids)"
_INSERT_POSTINGS_SQL = (
    "INSERT INTO chunk_terms (knowledge_base_id, lexeme, chunk_id, tf) "
    "SELECT c.knowledge_base_id, t.lexeme, c.id, coalesce(array_length(t.positions, 1), 1) "
    "FROM document_chunks c, unnest(c.content_tsvector) t WHERE c.id = ANY(:ids) ORDER BY 1, 2, 3")
_SORT_MEMORY_SQL = "SET LOCAL work_mem = '256MB'"  # the sort above in memory up to 256 MB


def searchable_chunks(conn: sa.Connection, kb_id, document_id, limit: int) -> tuple[Sequence[sa.Row], int]:
    """The first ``limit`` searchable chunks (of one document, or all) and how many there are in all."""
    params = {"kb": kb_id, "doc": document_id}
    return (conn.execute(sa.text(_LIST_SQL), {**params, "limit": limit}).all(),
            conn.execute(sa.text(_COUNT_SQL), params).scalar_one())


def phrase_chunks(conn: sa.Connection, kb_id, document_id, phrase: str, limit: int) -> sa.CursorResult:
    return conn.execute(sa.text(_PHRASE_SQL), {"kb": kb_id, "doc": document_id, "limit": limit, "phrase": phrase})


def chunks_with_ids(conn: sa.Connection, ids: list) -> sa.CursorResult:
    return conn.execute(sa.text(_BY_IDS_SQL), {"ids": ids})


def document_names(conn: sa.Connection, kb_id) -> Sequence[str]:
    return conn.execute(sa.text(_DOCUMENT_NAMES_SQL), {"kb": kb_id}).scalars().all()


def document_name(conn: sa.Connection, document_id) -> str | None:
    return conn.execute(sa.text("SELECT d.original_name FROM documents d WHERE d.id = :id"),
                        {"id": document_id}).scalar()


def named_document_chunks(conn: sa.Connection, kb_id, name: str) -> sa.CursorResult:
    return conn.execute(sa.text(_NAMED_DOCUMENT_CHUNKS_SQL), {"kb": kb_id, "name": name})


def named_documents(conn: sa.Connection, kb_id, names: list[str]) -> sa.CursorResult:
    """``(id, original_name, content, searchable)`` of the KB's documents of these names."""
    return conn.execute(sa.text(_TARGET_DOCS_SQL), {"kb": kb_id, "names": names})


def current_spans(conn: sa.Connection, document_ids: list) -> sa.CursorResult:
    """``(id, document_id, ordinal, char_start, char_end)`` of the documents' current chunks, by span."""
    return conn.execute(sa.text(_CURRENT_SPANS_SQL), {"docs": document_ids})


def insert_chunks(conn: sa.Connection, kb_id, cfg: str, rows: Iterable[tuple]) -> Sequence:
    """Write the chunks (rows of chunk_stage's columns) not current yet, with tsvector, token count and postings."""
    conn.execute(sa.text(_STAGE_SQL))
    with driver_connection(conn).cursor().copy("COPY chunk_stage FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
    inserted = conn.execute(sa.text(_INSERT_STAGED_SQL), {"kb": kb_id, "cfg": cfg}).scalars().all()
    conn.execute(sa.text(_DELETE_POSTINGS_SQL), {"ids": inserted})
    conn.execute(sa.text(_SORT_MEMORY_SQL))
    conn.execute(sa.text(_INSERT_POSTINGS_SQL), {"ids": inserted})
    conn.execute(sa.text("SET LOCAL work_mem TO DEFAULT"))
    conn.execute(sa.text("DROP TABLE chunk_stage"))
    return inserted


def retire_chunks(conn: sa.Connection, document_ids: list, keep: set) -> int:
    """Mark the documents' current chunks not in ``keep`` replaced (text and span kept) and drop their postings and
    vectors (a revived chunk is re-embedded); how many."""
    current = conn.execute(sa.text("SELECT id FROM document_chunks WHERE document_id = ANY(:d) AND is_current"),
                           {"d": document_ids}).scalars().all()
    params = {"ids": [c for c in current if c not in keep]}
    if not params["ids"]:
        return 0
    conn.execute(sa.text("UPDATE document_chunks SET is_current = false, replaced_at = now() WHERE id = ANY(:ids)"),
                 params)
    conn.execute(sa.text("DELETE FROM chunk_terms WHERE chunk_id = ANY(:ids)"), params)
    conn.execute(sa.text("DELETE FROM chunk_embeddings WHERE chunk_id = ANY(:ids)"), params)
    return len(params["ids"])


def current_chunk_count(conn: sa.Connection, kb_id) -> int:
    return conn.execute(sa.text("SELECT count(*) FROM document_chunks WHERE knowledge_base_id = :kb "
                                "AND is_current"), {"kb": kb_id}).scalar_one()
