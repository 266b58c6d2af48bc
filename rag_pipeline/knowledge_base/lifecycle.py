"""Knowledge bases and document lifecycle: create/look up a KB, mark documents, summarise contents."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from rag_pipeline.contracts.errors import NotFoundOrInvalidError
from rag_pipeline.knowledge_base import chunking, textsearch
from rag_pipeline.storage.names import KNOWLEDGE_BASE, check_name
from rag_pipeline.storage.schema import DocumentPublicationStatus, DocumentStatus

# The seed's rule for what retrieval may return, defined once: a document that is READY, PUBLISHED and not
# deleted (its current chunks). Used by the retrieval SQL, the counts below and the label check.
SEARCHABLE_STATUS = DocumentStatus.READY.value
SEARCHABLE_PUBLICATION = DocumentPublicationStatus.PUBLISHED.value
SEARCHABLE_DOCUMENT_SQL = (f"d.status = '{SEARCHABLE_STATUS}' AND d.publication_status = '{SEARCHABLE_PUBLICATION}' "
                           "AND NOT d.is_deleted")
DOCUMENT_STATUSES = (SEARCHABLE_STATUS, *(s.value for s in DocumentStatus if s.value != SEARCHABLE_STATUS))
PUBLICATION_STATUSES = (SEARCHABLE_PUBLICATION,
                        *(s.value for s in DocumentPublicationStatus if s.value != SEARCHABLE_PUBLICATION))


class KnowledgeBaseError(NotFoundOrInvalidError, LookupError):
    """Unknown knowledge base/document or conflicting settings; the message is for the user."""


def ensure_knowledge_base(conn: sa.Connection, name: str, text_search: str, chunk_size: int, chunk_overlap: int,
                          *, rechunk: bool = False):
    """Create the KB (deterministic id from its name) or check that its settings did not change.

    ``rechunk``: a different chunk size/overlap is accepted and becomes the KB's setting (the caller re-chunks
    every document; replaced chunks stay with ``is_current = false``). The text mode can never change (every
    tsvector was built with it). :func:`rechunking` tells whether the stored chunking differs."""
    check_name(KNOWLEDGE_BASE, name)  # the one name rule (InvalidNameError, a user error)
    textsearch.regconfig(text_search)
    kb_id = chunking.knowledge_base_id(name)
    row = conn.execute(
        sa.text("SELECT id, text_search, chunk_size, chunk_overlap FROM knowledge_bases WHERE name = :n"), {"n": name}
    ).first()
    if row is None:
        conn.execute(
            sa.text("INSERT INTO knowledge_bases (id, name, text_search, chunk_size, chunk_overlap, chunk_count, "
                    "avg_chunk_length) VALUES (:id, :n, :ts, :cs, :co, 0, 0) ON CONFLICT (name) DO NOTHING"),
            {"id": kb_id, "n": name, "ts": text_search, "cs": chunk_size, "co": chunk_overlap},
        )
        return kb_id
    chunking_changed = (row.chunk_size, row.chunk_overlap) != (chunk_size, chunk_overlap)
    if row.text_search != text_search or (chunking_changed and not rechunk):
        hint = (" (or --rechunk, Dagster config rechunk: true, to re-chunk this knowledge base in place, keeping "
                "the replaced chunks for `rag-pipeline fix-labels`)" if row.text_search == text_search else "")
        raise KnowledgeBaseError(
            f"knowledge base {name!r} was built with text_search={row.text_search}, chunk_size={row.chunk_size}, "
            f"chunk_overlap={row.chunk_overlap}; ingest with the same settings or use a new knowledge base name"
            + hint
        )
    if chunking_changed:
        conn.execute(sa.text("UPDATE knowledge_bases SET chunk_size = :cs, chunk_overlap = :co WHERE id = :id"),
                     {"cs": chunk_size, "co": chunk_overlap, "id": row.id})
    return row.id


def rechunking(conn: sa.Connection, name: str, chunk_size: int, chunk_overlap: int) -> bool:
    """Whether knowledge base ``name`` exists with another chunk size or overlap (ingesting it re-chunks)."""
    row = conn.execute(sa.text("SELECT chunk_size, chunk_overlap FROM knowledge_bases WHERE name = :n"),
                       {"n": name}).first()
    return row is not None and (row.chunk_size, row.chunk_overlap) != (chunk_size, chunk_overlap)


def resolve_knowledge_base(conn: sa.Connection, name_or_id: str) -> sa.Row:
    """The KB row (id, name, text_search, chunk_count, avg_chunk_length) by name or UUID."""
    try:
        as_uuid = uuid.UUID(str(name_or_id))
    except ValueError:
        as_uuid = None
    row = conn.execute(
        sa.text("SELECT id, name, text_search, chunk_size, chunk_overlap, chunk_count, avg_chunk_length "
                "FROM knowledge_bases WHERE name = :n OR id = :u"),
        {"n": str(name_or_id), "u": as_uuid},
    ).first()
    if row is None:
        known = conn.execute(sa.text("SELECT name FROM knowledge_bases ORDER BY name")).scalars().all()
        raise KnowledgeBaseError(
            f"unknown knowledge base {name_or_id!r}; known: {', '.join(known) if known else '(none — ingest one first)'}"
        )
    return row


def set_document_state(
    conn: sa.Connection,
    knowledge_base: str,
    document: str,
    *,
    status: str | None = None,
    publication_status: str | None = None,
    is_deleted: bool | None = None,
) -> int:
    """Change a document's lifecycle (READY/PROCESSING/FAILED, PUBLISHED/UNPUBLISHED/DRAFT, deleted).

    ``document`` is the document's original name or id. Returns the number of documents changed.
    """
    kb = resolve_knowledge_base(conn, knowledge_base)
    allowed = {"status": DOCUMENT_STATUSES, "publication_status": PUBLICATION_STATUSES}
    sets, params = [], {"kb": kb.id, "name": document}
    for column, value in (("status", status), ("publication_status", publication_status)):
        if value is not None:
            if value.upper() not in allowed[column]:
                raise KnowledgeBaseError(f"{column} must be one of {', '.join(allowed[column])}, got {value!r}")
            sets.append(f"{column} = :{column}")
            params[column] = value.upper()
    if is_deleted is not None:
        sets.append("is_deleted = :is_deleted")
        params["is_deleted"] = is_deleted
    if not sets:
        raise KnowledgeBaseError("nothing to change: give a status, a publication status or deleted")
    try:
        params["id"] = uuid.UUID(document)
    except ValueError:
        params["id"] = None
    from rag_pipeline.knowledge_base import term_stats  # noqa: PLC0415 (term_stats uses this module's rule)

    doc_ids = conn.execute(sa.text("SELECT id FROM documents WHERE knowledge_base_id = :kb "
                                   "AND (original_name = :name OR id = :id)"), params).scalars().all()
    with term_stats.tracking(conn, kb.id, doc_ids):  # BM25 statistics follow what is searchable, same transaction
        changed = conn.execute(
            sa.text(f"UPDATE documents SET {', '.join(sets)}, updated_at = now() WHERE id = ANY(:ids)"),
            {**params, "ids": doc_ids},
        ).rowcount
    if not changed:
        raise KnowledgeBaseError(f"no document {document!r} in knowledge base {kb.name!r}")
    return changed


_DOCUMENT_COUNTS_SQL = (f"SELECT count(*) AS total, count(*) FILTER (WHERE {SEARCHABLE_DOCUMENT_SQL}) AS searchable "
                        "FROM documents d WHERE d.knowledge_base_id = :kb")


def knowledge_base_stats(conn: sa.Connection, name_or_id: str) -> dict:
    """Counts for the CLI and asset metadata."""
    kb = resolve_knowledge_base(conn, name_or_id)
    docs = conn.execute(sa.text(_DOCUMENT_COUNTS_SQL), {"kb": kb.id}).one()
    chunks = conn.execute(sa.text(
        "SELECT count(*) FILTER (WHERE is_current) AS current, count(*) FILTER (WHERE NOT is_current) AS replaced "
        "FROM document_chunks WHERE knowledge_base_id = :kb"), {"kb": kb.id}).one()
    models = conn.execute(sa.text(
        "SELECT model, count(*) FROM chunk_embeddings WHERE knowledge_base_id = :kb GROUP BY model ORDER BY model"),
        {"kb": kb.id}).all()
    return {
        "knowledge_base": kb.name,
        "knowledge_base_id": str(kb.id),
        "text_search": kb.text_search,
        "documents": docs.total,
        "searchable_documents": docs.searchable,
        "current_chunks": chunks.current,
        "replaced_chunks": chunks.replaced,
        "embeddings": {m: n for m, n in models},
        "avg_chunk_tokens": round(float(kb.avg_chunk_length), 2),
    }
