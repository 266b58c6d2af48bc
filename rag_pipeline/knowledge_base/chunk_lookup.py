"""Finding chunks to label: list a knowledge base's searchable chunks, match a phrase, fetch chunks by id.

What a person labels are ``document_chunks.id`` values (seed §2); these queries show them with their document,
ordinal, character span and text, so nobody has to write the three-table join by hand. "Searchable" is the one
rule of :data:`lifecycle.SEARCHABLE_DOCUMENT_SQL` (a current chunk of a READY, PUBLISHED, not deleted document):
exactly the chunks a label may name. :func:`chunks_by_ids` also returns replaced (``is_current = false``) chunks
and chunks of other knowledge bases, for the label fixes.
"""

from __future__ import annotations

import difflib
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import sqlalchemy as sa

from rag_pipeline.knowledge_base.lifecycle import SEARCHABLE_DOCUMENT_SQL, KnowledgeBaseError


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

    def as_dict(self) -> dict:
        return asdict(self)


_COLUMNS = ("c.id, c.document_id, d.original_name, c.ordinal, c.char_start, c.char_end, c.content, c.is_current, "
            "c.knowledge_base_id")
_SEARCHABLE = f"c.knowledge_base_id = :kb AND c.is_current AND {SEARCHABLE_DOCUMENT_SQL}"
_ORDER = "d.original_name, c.ordinal, c.char_start, c.id"

_LIST_SQL = (f"SELECT {_COLUMNS} FROM document_chunks c JOIN documents d ON d.id = c.document_id "
             f"WHERE {_SEARCHABLE} AND (CAST(:doc AS uuid) IS NULL OR c.document_id = CAST(:doc AS uuid)) "
             f"ORDER BY {_ORDER} LIMIT :limit")
_COUNT_SQL = ("SELECT count(*) FROM document_chunks c JOIN documents d ON d.id = c.document_id "
              f"WHERE {_SEARCHABLE} AND (CAST(:doc AS uuid) IS NULL OR c.document_id = CAST(:doc AS uuid))")
# Case-insensitive substring (strpos: no LIKE wildcards to escape); works for any script, jieba or not.
_PHRASE_SQL = (f"SELECT {_COLUMNS} FROM document_chunks c JOIN documents d ON d.id = c.document_id "
               f"WHERE {_SEARCHABLE} AND (CAST(:doc AS uuid) IS NULL OR c.document_id = CAST(:doc AS uuid)) "
               f"AND strpos(lower(c.content), lower(:phrase)) > 0 ORDER BY {_ORDER} LIMIT :limit")
_BY_IDS_SQL = (f"SELECT {_COLUMNS} FROM document_chunks c JOIN documents d ON d.id = c.document_id "
               "WHERE c.id = ANY(:ids)")
_DOCUMENT_SQL = ("SELECT id, original_name FROM documents WHERE knowledge_base_id = :kb "
                 "AND (original_name = :name OR id = :id)")
_DOCUMENT_NAMES_SQL = "SELECT original_name FROM documents WHERE knowledge_base_id = :kb ORDER BY original_name"
_MODELS_SQL = ("SELECT DISTINCT e.model FROM chunk_embeddings e JOIN document_chunks c ON c.id = e.chunk_id "
               "WHERE e.knowledge_base_id = :kb AND c.is_current ORDER BY e.model")


def _row(r) -> ChunkRow:
    return ChunkRow(str(r.id), str(r.document_id), r.original_name, r.ordinal, r.char_start, r.char_end, r.content,
                    r.is_current, str(r.knowledge_base_id))


def as_uuid(value: object) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value).strip())
    except (ValueError, AttributeError, TypeError):
        return None


def resolve_document(conn: sa.Connection, kb_id, kb_name: str, name_or_id: str) -> tuple[str, str]:
    """``(document id, original name)`` of a document of the knowledge base, by original name or id; an unknown
    one is a :class:`KnowledgeBaseError` naming the closest names."""
    row = conn.execute(sa.text(_DOCUMENT_SQL), {"kb": kb_id, "name": name_or_id, "id": as_uuid(name_or_id)}).first()
    if row is not None:
        return str(row.id), row.original_name
    names = conn.execute(sa.text(_DOCUMENT_NAMES_SQL), {"kb": kb_id}).scalars().all()
    close = difflib.get_close_matches(name_or_id, names, n=5, cutoff=0.4)
    hint = f"; did you mean {', '.join(repr(n) for n in close)}?" if close else ""
    raise KnowledgeBaseError(f"no document {name_or_id!r} in knowledge base {kb_name!r} "
                             f"({len(names)} documents){hint}")


def list_chunks(conn: sa.Connection, kb_id, *, document_id: str | None = None, limit: int = 50
                ) -> tuple[list[ChunkRow], int]:
    """The searchable chunks (of one document, or all) in document name and ordinal order, at most ``limit``;
    and how many there are in all."""
    params = {"kb": kb_id, "doc": document_id, "limit": limit}
    rows = [_row(r) for r in conn.execute(sa.text(_LIST_SQL), params)]
    return rows, conn.execute(sa.text(_COUNT_SQL), params).scalar_one()


def phrase_matches(conn: sa.Connection, kb_id, phrase: str, *, document_id: str | None = None,
                   limit: int = 50) -> list[ChunkRow]:
    """Searchable chunks whose text contains ``phrase`` (case-insensitive), in document and ordinal order."""
    if not phrase.strip():
        return []
    params = {"kb": kb_id, "doc": document_id, "limit": limit, "phrase": phrase.strip().replace("\x00", "")}
    return [_row(r) for r in conn.execute(sa.text(_PHRASE_SQL), params)]


def chunks_by_ids(conn: sa.Connection, ids: Iterable[str]) -> dict[str, ChunkRow]:
    """Any chunk (current or replaced, any knowledge base) by id; ids that are no chunk are left out."""
    wanted = sorted({u for u in (as_uuid(i) for i in ids) if u is not None})
    if not wanted:
        return {}
    return {str(r.id): _row(r) for r in conn.execute(sa.text(_BY_IDS_SQL), {"ids": wanted})}


def embedding_models(conn: sa.Connection, kb_id) -> list[str]:
    """The embedding models the knowledge base's current chunks have vectors of."""
    return list(conn.execute(sa.text(_MODELS_SQL), {"kb": kb_id}).scalars())


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


_DOCUMENT_OF_SQL = "SELECT d.original_name FROM documents d WHERE d.id = :id"
_NAMED_DOCUMENT_CHUNKS_SQL = (f"SELECT {_COLUMNS} FROM document_chunks c JOIN documents d ON d.id = c.document_id "
                              f"WHERE {_SEARCHABLE} AND d.original_name = :name ORDER BY c.ordinal, c.id")


def document_chunks_for(conn: sa.Connection, document_id: str, kb_id) -> tuple[str | None, list[ChunkRow]]:
    """For a document id (of any knowledge base): its original name and the searchable chunks of the document of
    that name in knowledge base ``kb_id`` (``(None, [])`` when no document has the id)."""
    u = as_uuid(document_id)
    name = conn.execute(sa.text(_DOCUMENT_OF_SQL), {"id": u}).scalar() if u else None
    if name is None:
        return None, []
    return name, [_row(r) for r in conn.execute(sa.text(_NAMED_DOCUMENT_CHUNKS_SQL), {"kb": kb_id, "name": name})]
