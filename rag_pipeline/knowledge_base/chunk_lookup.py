"""Finding chunks to label (docs/design.md §2): list a knowledge base's searchable chunks, match a phrase, fetch
chunks by id (:func:`chunks_by_ids`: replaced ones and other knowledge bases' too, for the label fixes)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError
from rag_pipeline.knowledge_base.queries import chunks as queries
from rag_pipeline.knowledge_base.queries import vectors
from rag_pipeline.knowledge_base.queries.documents import documents_named
from rag_pipeline.storage.ids import as_uuid


@dataclass(frozen=True)
class ChunkRow:
    """One chunk as a labeller sees it."""

    chunk_id: str
    document_id: str
    document_name: str
    ordinal: int
    char_start: int
    char_end: int
    text: str
    is_current: bool = True
    knowledge_base_id: str | None = None


def _row(r) -> ChunkRow:
    return ChunkRow(str(r.id), str(r.document_id), r.original_name, r.ordinal, r.char_start, r.char_end, r.content,
                    r.is_current, str(r.knowledge_base_id))


def resolve_document(conn: sa.Connection, kb_id, kb_name: str, name_or_id: str) -> tuple[str, str]:
    """``(document id, original name)`` of a document of the knowledge base, by original name or id; an unknown
    one is a :class:`KnowledgeBaseError` naming the closest names."""
    row = documents_named(conn, kb_id, name_or_id, as_uuid(name_or_id)).first()
    if row is not None:
        return str(row.id), row.original_name
    names = queries.document_names(conn, kb_id)
    close = difflib.get_close_matches(name_or_id, names, n=5, cutoff=0.4)
    hint = f"; did you mean {', '.join(repr(n) for n in close)}?" if close else ""
    raise KnowledgeBaseError(f"no document {name_or_id!r} in knowledge base {kb_name!r} ({len(names)} documents){hint}")


def list_chunks(conn: sa.Connection, kb_id, *, document_id: str | None = None, limit: int = 50
                ) -> tuple[list[ChunkRow], int]:
    """The searchable chunks (of one document, or all) in document name and ordinal order, at most ``limit``;
    and how many there are in all."""
    rows, total = queries.searchable_chunks(conn, kb_id, document_id, limit)
    return [_row(r) for r in rows], total


def phrase_matches(conn: sa.Connection, kb_id, phrase: str, *, document_id: str | None = None,
                   limit: int = 50) -> list[ChunkRow]:
    """Searchable chunks whose text contains ``phrase`` (case-insensitive), in document and ordinal order."""
    if not phrase.strip():
        return []
    phrase = phrase.strip().replace("\x00", "")
    return [_row(r) for r in queries.phrase_chunks(conn, kb_id, document_id, phrase, limit)]


def chunks_by_ids(conn: sa.Connection, ids: Iterable[str]) -> dict[str, ChunkRow]:
    """Any chunk (current or replaced, any knowledge base) by id; ids that are no chunk are left out."""
    wanted = sorted({u for u in (as_uuid(i) for i in ids) if u is not None})
    return {str(r.id): _row(r) for r in queries.chunks_with_ids(conn, wanted)} if wanted else {}


def embedding_models(conn: sa.Connection, kb_id) -> list[str]:
    """The embedding models the knowledge base's current chunks have vectors of."""
    return vectors.embedding_models(conn, kb_id)


def snippet(text: str, around: Sequence[str] = (), width: int = 160) -> str:
    """``text`` on one line, cut to about ``width`` characters around the first of ``around`` found in it
    (case-insensitive), with ``…`` where something was cut."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    lowered = flat.lower()
    hits = [i for i in (lowered.find(" ".join(w.split()).lower()) for w in around if w and w.strip()) if i >= 0]
    start = max(0, min(hits) - width // 4) if hits else 0
    start = min(start, len(flat) - width)
    piece = flat[start:start + width]
    return ("…" if start > 0 else "") + piece + ("…" if start + width < len(flat) else "")


def document_chunks_for(conn: sa.Connection, document_id: str, kb_id) -> tuple[str | None, list[ChunkRow]]:
    """For a document id (of any knowledge base): its original name and the searchable chunks of the document of
    that name in knowledge base ``kb_id`` (``(None, [])`` when no document has the id)."""
    u = as_uuid(document_id)
    name = queries.document_name(conn, u) if u else None
    if name is None:
        return None, []
    return name, [_row(r) for r in queries.named_document_chunks(conn, kb_id, name)]
