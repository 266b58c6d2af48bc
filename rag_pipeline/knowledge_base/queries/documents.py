"""SQL of knowledge bases and documents: KB rows and settings, document lifecycle, counts, the content digest."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from rag_pipeline.storage.tables import DocumentPublicationStatus, DocumentStatus

# The rule for what retrieval may return (docs/design.md §3.3), defined once: a document that is READY, PUBLISHED and
# not deleted (its current chunks). Used by the retrieval SQL, the counts below and the label check.
SEARCHABLE_STATUS = DocumentStatus.READY.value
SEARCHABLE_PUBLICATION = DocumentPublicationStatus.PUBLISHED.value
SEARCHABLE_DOCUMENT_SQL = (f"d.status = '{SEARCHABLE_STATUS}' AND d.publication_status = '{SEARCHABLE_PUBLICATION}' "
                           "AND NOT d.is_deleted")

_INSERT_KB_SQL = ("INSERT INTO knowledge_bases (id, name, text_search, chunk_size, chunk_overlap, chunk_count, "
                  "avg_chunk_length) VALUES (:id, :n, :ts, :cs, :co, 0, 0) ON CONFLICT (name) DO NOTHING")
_KB_BY_NAME_OR_ID_SQL = ("SELECT id, name, text_search, chunk_size, chunk_overlap, chunk_count, avg_chunk_length, kind "
                         "FROM knowledge_bases WHERE name = :n OR id = :u")
_UPSERT_DOCUMENTS_SQL = (
    "INSERT INTO documents (id, knowledge_base_id, original_name, title, content, content_hash, "
    "status, publication_status, is_deleted) VALUES (:id, :kb, :name, :title, :content, :hash, "
    "'READY', 'PUBLISHED', false) ON CONFLICT (id) DO UPDATE SET content = EXCLUDED.content, "
    "title = EXCLUDED.title, content_hash = EXCLUDED.content_hash, is_deleted = false, updated_at = now()")
_DOCUMENT_STATE_COLUMNS = ("status", "publication_status", "is_deleted")
_DOCUMENT_COUNTS_SQL = (f"SELECT count(*) AS total, count(*) FILTER (WHERE {SEARCHABLE_DOCUMENT_SQL}) AS searchable "
                        "FROM documents d WHERE d.knowledge_base_id = :kb")
_CHUNK_COUNTS_SQL = ("SELECT count(*) FILTER (WHERE is_current) AS current, count(*) FILTER (WHERE NOT is_current) "
                     "AS replaced FROM document_chunks WHERE knowledge_base_id = :kb")
_EMBEDDING_COUNTS_SQL = ("SELECT model, count(*) FROM chunk_embeddings WHERE knowledge_base_id = :kb "
                         "GROUP BY model ORDER BY model")

_VERSION_SQL = f"""
SELECT count(*) AS searchable_chunks,
       encode(sha256(convert_to(coalesce(
           string_agg(c.id::text || ':' || coalesce(m.models, ''), E'\\n' ORDER BY c.id), ''), 'UTF8')), 'hex')
           AS digest
FROM document_chunks c
JOIN documents d ON d.id = c.document_id
LEFT JOIN (  -- grouped once, not a lookup per chunk (same digest; bench/RESULTS.md)
    SELECT e.chunk_id, string_agg(e.model, ',' ORDER BY e.model) AS models
    FROM chunk_embeddings e WHERE e.knowledge_base_id = :kb GROUP BY e.chunk_id
) AS m ON m.chunk_id = c.id
WHERE c.knowledge_base_id = :kb AND c.is_current AND {SEARCHABLE_DOCUMENT_SQL}
"""

_SEARCHABLE_EMBEDDING_COUNTS_SQL = f"""
SELECT e.model, count(*) AS n
FROM chunk_embeddings e
JOIN document_chunks c ON c.id = e.chunk_id
JOIN documents d ON d.id = c.document_id
WHERE c.knowledge_base_id = :kb AND c.is_current AND {SEARCHABLE_DOCUMENT_SQL}
GROUP BY e.model ORDER BY e.model
"""


def knowledge_base_settings(conn: sa.Connection, name: str) -> sa.Row | None:
    """``(id, text_search, chunk_size, chunk_overlap, kind)`` of the KB named ``name``."""
    return conn.execute(sa.text("SELECT id, text_search, chunk_size, chunk_overlap, kind FROM knowledge_bases "
                                "WHERE name = :n"), {"n": name}).first()


def insert_knowledge_base(conn: sa.Connection, kb_id, name: str, text_search: str, chunk_size: int,
                          chunk_overlap: int) -> None:
    conn.execute(sa.text(_INSERT_KB_SQL),
                 {"id": kb_id, "n": name, "ts": text_search, "cs": chunk_size, "co": chunk_overlap})


def set_chunking(conn: sa.Connection, kb_id, chunk_size: int, chunk_overlap: int) -> None:
    conn.execute(sa.text("UPDATE knowledge_bases SET chunk_size = :cs, chunk_overlap = :co WHERE id = :id"),
                 {"cs": chunk_size, "co": chunk_overlap, "id": kb_id})


def knowledge_base_by_name_or_id(conn: sa.Connection, name: str, kb_id) -> sa.Row | None:
    return conn.execute(sa.text(_KB_BY_NAME_OR_ID_SQL), {"n": name, "u": kb_id}).first()


def knowledge_base_names(conn: sa.Connection) -> Sequence[str]:
    return conn.execute(sa.text("SELECT name FROM knowledge_bases ORDER BY name")).scalars().all()


def documents_of(conn: sa.Connection, kb_id) -> sa.CursorResult:
    """``(id, original_name, content_hash, is_deleted)`` of every document of the KB."""
    return conn.execute(sa.text("SELECT id, original_name, content_hash, is_deleted FROM documents "
                                "WHERE knowledge_base_id = :kb"), {"kb": kb_id})


def upsert_documents(conn: sa.Connection, rows: list[dict]) -> None:
    """Write documents (``id, kb, name, title, content, hash``) as READY, PUBLISHED and not deleted."""
    conn.execute(sa.text(_UPSERT_DOCUMENTS_SQL), rows)


def mark_deleted(conn: sa.Connection, document_ids: list) -> None:
    conn.execute(sa.text("UPDATE documents SET is_deleted = true, updated_at = now() WHERE id = ANY(:ids)"),
                 {"ids": document_ids})


def documents_named(conn: sa.Connection, kb_id, name: str, document_id) -> sa.CursorResult:
    """``(id, original_name)`` of the KB's documents whose original name is ``name`` or whose id is ``document_id``."""
    return conn.execute(sa.text("SELECT id, original_name FROM documents WHERE knowledge_base_id = :kb "
                                "AND (original_name = :name OR id = :id)"),
                        {"kb": kb_id, "name": name, "id": document_id})


def set_document_state(conn: sa.Connection, document_ids: list, values: dict) -> int:
    """Set the lifecycle columns in ``values`` (status, publication_status, is_deleted); the rows changed."""
    sets = ", ".join(f"{column} = :{column}" for column in _DOCUMENT_STATE_COLUMNS if column in values)
    return conn.execute(sa.text(f"UPDATE documents SET {sets}, updated_at = now() WHERE id = ANY(:ids)"),
                        {**values, "ids": document_ids}).rowcount


def content_counts(conn: sa.Connection, kb_id) -> dict:
    """The KB's documents (all, searchable), chunks (current, replaced) and vectors per model, by model."""
    docs = conn.execute(sa.text(_DOCUMENT_COUNTS_SQL), {"kb": kb_id}).one()
    chunks = conn.execute(sa.text(_CHUNK_COUNTS_SQL), {"kb": kb_id}).one()
    models = conn.execute(sa.text(_EMBEDDING_COUNTS_SQL), {"kb": kb_id}).all()
    return {"documents": docs.total, "searchable_documents": docs.searchable, "current_chunks": chunks.current,
            "replaced_chunks": chunks.replaced, "embeddings": dict(models)}


def content_digest(conn: sa.Connection, kb_id) -> tuple[sa.Row, dict[str, int]]:
    """``(searchable_chunks, digest)``: SHA-256 hex over the searchable chunk ids with their models, in id order;
    and the searchable chunks with a vector, per model."""
    digest = conn.execute(sa.text(_VERSION_SQL), {"kb": kb_id}).one()
    return digest, {r.model: int(r.n) for r in conn.execute(sa.text(_SEARCHABLE_EMBEDDING_COUNTS_SQL), {"kb": kb_id})}

