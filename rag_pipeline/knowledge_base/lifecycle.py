"""Knowledge bases and document lifecycle: create/look up a KB, mark documents, summarise contents."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import sqlalchemy as sa

from rag_pipeline.contracts.errors import NotFoundOrInvalidError
from rag_pipeline.knowledge_base import chunking, term_stats, textsearch
from rag_pipeline.knowledge_base.queries import catalogue as catalogue_queries
from rag_pipeline.knowledge_base.queries import documents as queries
from rag_pipeline.knowledge_base.queries.documents import SEARCHABLE_PUBLICATION, SEARCHABLE_STATUS
from rag_pipeline.storage.names import KNOWLEDGE_BASE, check_name
from rag_pipeline.storage.tables import DocumentPublicationStatus, DocumentStatus

# What retrieval may return (queries.documents.SEARCHABLE_DOCUMENT_SQL): the first of each list of values.
DOCUMENT_STATUSES = (SEARCHABLE_STATUS, *(s.value for s in DocumentStatus if s.value != SEARCHABLE_STATUS))
PUBLICATION_STATUSES = (SEARCHABLE_PUBLICATION,
                        *(s.value for s in DocumentPublicationStatus if s.value != SEARCHABLE_PUBLICATION))


class KnowledgeBaseError(NotFoundOrInvalidError, LookupError):
    """Unknown knowledge base/document or conflicting settings; the message is for the user."""


def ensure_knowledge_base(conn: sa.Connection, name: str, text_search: str, chunk_size: int, chunk_overlap: int,
                          *, rechunk: bool = False) -> tuple[uuid.UUID, bool]:
    """Create the KB (deterministic id from its name) or check that its settings did not change; ``(its id,
    whether its chunking changed)``. ``rechunk`` accepts a new chunk size/overlap; the text mode never changes."""
    check_name(KNOWLEDGE_BASE, name)  # the one name rule (InvalidNameError, a user error)
    textsearch.regconfig(text_search)
    kb_id = chunking.knowledge_base_id(name)
    row = queries.knowledge_base_settings(conn, name)
    if row is None:
        queries.insert_knowledge_base(conn, kb_id, name, text_search, chunk_size, chunk_overlap)
        return kb_id, False
    if row.kind == "attached":
        raise KnowledgeBaseError(f"knowledge base {name!r} is attached (your own database, read only): nothing is "
                                 "ingested into it; ingest under another name")
    if row.kind == "external":
        raise KnowledgeBaseError(f"knowledge base {name!r} is external (a chunk catalogue of your system's documents: "
                                 "rag-pipeline kb catalogue): nothing is ingested into it; ingest under another name")
    chunking_changed = (row.chunk_size, row.chunk_overlap) != (chunk_size, chunk_overlap)
    if row.text_search != text_search or (chunking_changed and not rechunk):
        hint = (" (or --rechunk, Dagster config rechunk: true, to re-chunk this knowledge base in place, keeping "
                "the replaced chunks for `rag-pipeline fix-labels`)" if row.text_search == text_search else "")
        raise KnowledgeBaseError(
            f"knowledge base {name!r} was built with text_search={row.text_search}, chunk_size={row.chunk_size}, "
            f"chunk_overlap={row.chunk_overlap}; ingest with the same settings or use a new knowledge base name" + hint)
    if chunking_changed:
        queries.set_chunking(conn, row.id, chunk_size, chunk_overlap)
    return row.id, chunking_changed


@dataclass(frozen=True)
class KnowledgeBaseRef:
    """A knowledge base resolved by :func:`resolve_knowledge_base`: what a run and its checks read of it."""

    id: uuid.UUID
    name: str
    text_search: str
    chunk_size: int
    chunk_overlap: int
    chunk_count: int
    avg_chunk_length: float
    kind: str = "project"
    """``project`` (ingested here), ``attached`` (the user's tables: :mod:`rag_pipeline.knowledge_base.attached`) or
    ``external`` (a chunk catalogue only: :mod:`rag_pipeline.knowledge_base.catalogue`)."""


def resolve_knowledge_base(conn: sa.Connection, name_or_id: str | uuid.UUID | KnowledgeBaseRef) -> KnowledgeBaseRef:
    """The knowledge base named ``name_or_id`` (a name or a UUID); one already resolved is returned as it is."""
    if isinstance(name_or_id, KnowledgeBaseRef):
        return name_or_id
    try:
        as_uuid = uuid.UUID(str(name_or_id))
    except ValueError:
        as_uuid = None
    row = queries.knowledge_base_by_name_or_id(conn, str(name_or_id), as_uuid)
    if row is None:
        known = queries.knowledge_base_names(conn)
        raise KnowledgeBaseError(f"unknown knowledge base {name_or_id!r}; known: "
                                 f"{', '.join(known) if known else '(none — ingest one first)'}")
    return KnowledgeBaseRef(**row._mapping)


def set_document_state(conn: sa.Connection, knowledge_base: str, document: str, *, status: str | None = None,
                       publication_status: str | None = None, is_deleted: bool | None = None) -> int:
    """Change the lifecycle of ``document`` (original name or id): status, publication, deleted; returns the number
    of documents changed."""
    kb = resolve_knowledge_base(conn, knowledge_base)
    allowed = {"status": DOCUMENT_STATUSES, "publication_status": PUBLICATION_STATUSES}
    values: dict[str, str | bool] = {}
    for column, value in (("status", status), ("publication_status", publication_status)):
        if value is not None:
            if value.upper() not in allowed[column]:
                raise KnowledgeBaseError(f"{column} must be one of {', '.join(allowed[column])}, got {value!r}")
            values[column] = value.upper()
    if is_deleted is not None:
        values["is_deleted"] = is_deleted
    if not values:
        raise KnowledgeBaseError("nothing to change: give a status, a publication status or deleted")
    try:
        document_id = uuid.UUID(document)
    except ValueError:
        document_id = None
    doc_ids = [r.id for r in queries.documents_named(conn, kb.id, document, document_id)]
    with term_stats.tracking(conn, kb.id, doc_ids):  # BM25 statistics follow what is searchable, same transaction
        changed = queries.set_document_state(conn, doc_ids, values)
    if not changed:
        raise KnowledgeBaseError(f"no document {document!r} in knowledge base {kb.name!r}")
    return changed


def knowledge_base_stats(conn: sa.Connection, name_or_id: str) -> dict:
    """Counts for the CLI and asset metadata."""
    kb = resolve_knowledge_base(conn, name_or_id)
    return {"knowledge_base": kb.name, "knowledge_base_id": str(kb.id), "text_search": kb.text_search,
            **queries.content_counts(conn, kb.id), "avg_chunk_tokens": round(float(kb.avg_chunk_length), 2),
            "kind": kb.kind, "catalogued_chunks": catalogue_queries.count(conn, kb.id)}
