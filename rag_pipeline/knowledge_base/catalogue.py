"""The chunk catalogue of an external system (docs/evaluating.md, "Chunk catalogue"): the text of the documents an
HTTP retriever or a TREC run file returns, so that labelling, the label check and the chunk text work without
chunks ingested into the project.

A catalogued chunk is a row of ``external_chunk_ids`` with its ``content``: the original id (a string, any id),
the chunk UUID it is stored as (a canonical UUID is itself, any other id its uuid5, as a TREC docno's) and its
title and text. ``rag-pipeline kb catalogue NAME --corpus FILE`` loads a corpus file — BEIR ``corpus.jsonl``
(``_id``, ``title``, ``text``) or id/text JSON Lines (``id``, ``text``, optional ``title``) — streamed into
PostgreSQL by COPY in one transaction; the catalogue then holds exactly the file's documents. A knowledge base that
does not exist is created of kind ``external``: it holds only a catalogue (nothing is ingested into it)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import sqlalchemy as sa

from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.contracts.knowledge_base import CatalogueResult
from rag_pipeline.knowledge_base import chunking, jsonl_lines
from rag_pipeline.knowledge_base.chunk_lookup import ChunkRow
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError, KnowledgeBaseRef
from rag_pipeline.knowledge_base.queries import catalogue as queries
from rag_pipeline.settings import get_settings
from rag_pipeline.storage.files import open_regular, read_lines_bounded
from rag_pipeline.storage.ids import chunk_key, key_prefix, uuid_strings
from rag_pipeline.storage.names import KNOWLEDGE_BASE, check_name, printable

FORMATS = ("beir", "jsonl")
ID_FIELD = {"beir": "_id", "jsonl": "id"}
KIND = "external"
_JSON_ESCAPE_FACTOR = 6  # a JSON string escapes a character in at most 6 bytes (\uXXXX)
_LINE_SLACK = 1024 * 1024


class CatalogueError(BadInputError, ValueError):
    """A corpus file that cannot be catalogued (the message names the file, the line and the field); nothing is
    stored."""


def detect_format(obj: dict) -> str:
    """``beir`` when the first document has an ``_id``, ``jsonl`` when it has an ``id``."""
    if "_id" in obj:
        return "beir"
    if "id" in obj:
        return "jsonl"
    raise jsonl_lines.LineError("field '_id' (BEIR corpus.jsonl) or 'id' (id/text JSON Lines) is missing")


def _document(obj: dict, fmt: str) -> tuple[str, str | None, str]:
    """``(id, title, text)`` of one line's object, checked as the format says."""
    field = ID_FIELD[fmt]
    if obj.get(field) is None:
        raise jsonl_lines.LineError(f"field {field!r} is missing (format {fmt})")
    doc_id = jsonl_lines.document_id({field: obj[field]})
    text = jsonl_lines.string_field(obj, "text")
    title = jsonl_lines.string_field(obj, "title", optional=True)
    for name, value in (("text", text), ("title", title)):
        if value is not None and "\x00" in value:
            raise jsonl_lines.LineError(f"'{name}' contains a NUL character, which PostgreSQL text cannot hold")
    return doc_id, title or None, text


def read_corpus(path: str | Path, knowledge_base: str, fmt: str | None = None,
                found: list[str] | None = None) -> Iterator[tuple[int, str, str, str | None, str]]:
    """``(line, chunk UUID, original id, title, text)`` of every non-blank line, streamed; the format is
    ``fmt`` or detected from the first document (appended to ``found``). A bad line is a :class:`CatalogueError`
    naming the file, the line and the field."""
    path = Path(path)
    prefix = key_prefix(knowledge_base)
    max_line = get_settings().max_document_bytes * _JSON_ESCAPE_FACTOR + _LINE_SLACK
    with open_regular(path) as handle:
        for lineno, _offset, raw in read_lines_bounded(handle, path, max_line, what="the line"):
            where = f"{printable(str(path))}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CatalogueError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start} of the line)") \
                    from None
            if lineno == 1:
                line = line.removeprefix("\ufeff")
            if not line.strip():
                continue
            try:
                obj = jsonl_lines.parse_line(line)
                if fmt is None:
                    fmt = detect_format(obj)
                    if found is not None:
                        found.append(fmt)
                doc_id, title, text = _document(obj, fmt)
            except jsonl_lines.LineError as exc:
                raise CatalogueError(f"{where}: {exc}; nothing was stored") from None
            key, _derived = chunk_key(prefix, doc_id)
            yield lineno, key, doc_id, title, text


def catalogue(engine: sa.Engine, name: str, path: str | Path, fmt: str | None = None) -> CatalogueResult:
    """Load the corpus file ``path`` as knowledge base ``name``'s catalogue (created of kind ``external`` when it
    does not exist), in one transaction: the catalogue becomes the file's documents. Refused, nothing stored: a bad
    line, an id given twice, a knowledge base ingested into the project or attached."""
    check_name(KNOWLEDGE_BASE, name)
    if fmt is not None and fmt not in FORMATS:
        raise CatalogueError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    t0 = time.perf_counter()
    found: list[str] = [fmt] if fmt else []
    with engine.begin() as conn:
        kb_id, created = _external_knowledge_base(conn, name)
        queries.create_staging(conn)
        n = queries.copy_staging(conn, read_corpus(path, name, fmt, found))
        if n == 0:
            raise CatalogueError(f"{printable(str(path))}: no document (one JSON object per line); nothing was stored")
        dup = queries.first_duplicate(conn)
        if dup is not None:
            raise CatalogueError(f"{printable(str(path))}:{dup.second}: field {ID_FIELD[found[0]]!r}: id "
                                 f"{printable(repr(dup.external_id))} is given twice (first on line {dup.first}); "
                                 "nothing was stored")
        _written, dropped = queries.replace_from_staging(conn, kb_id)
        total = queries.count(conn, kb_id)
    return CatalogueResult(knowledge_base=name, knowledge_base_id=str(kb_id), created=created, file=str(path),
                           format=found[0], documents=n, catalogued=total, dropped=dropped,
                           seconds=round(time.perf_counter() - t0, 3))


def _external_knowledge_base(conn: sa.Connection, name: str) -> tuple[uuid.UUID, bool]:
    """``(id, created)`` of knowledge base ``name``, created of kind ``external`` when new; another kind is a
    :class:`KnowledgeBaseError` saying why."""
    row = queries.lock_knowledge_base(conn, name)
    if row is None:
        kb_id = chunking.knowledge_base_id(name)
        if queries.insert_external(conn, kb_id, name):
            return kb_id, True
        row = queries.lock_knowledge_base(conn, name)
        assert row is not None
    if row.kind == "attached":
        raise KnowledgeBaseError(f"knowledge base {name!r} is attached (your own database): its chunks and texts are "
                                 "read from your table, so it has no catalogue; catalogue under another name")
    if row.kind != KIND:
        chunks = queries.own_chunks(conn, row.id)
        raise KnowledgeBaseError(f"knowledge base {name!r} was ingested into this project ({chunks} chunks): its "
                                 "labels and texts are its own chunks; catalogue an external system's documents "
                                 "under another name")
    return row.id, False


def is_external(kb: KnowledgeBaseRef) -> bool:
    return kb.kind == KIND


def no_built_in_strategy(kb: KnowledgeBaseRef, version: str) -> str:
    """Why a built-in strategy (legs of ours) cannot run on an external knowledge base."""
    return (f"strategy {version} cannot run on knowledge base {kb.name!r}: it is external (a chunk catalogue of "
            "your system's documents, nothing ingested), so only an http strategy (your retriever) or a TREC run "
            "file import ranks it")


def _row(r) -> ChunkRow:
    """A catalogued chunk as a labeller sees it: its original id in place of a document name (``ordinal`` -1, the
    character span the whole text, the title before the text when there is one)."""
    text = f"{r.title}\n\n{r.content}" if r.title else r.content
    return ChunkRow(r.chunk_id, "", r.external_id, -1, 0, len(text), text, True, r.knowledge_base_id)


def chunk_rows(conn: sa.Connection, kb: KnowledgeBaseRef | uuid.UUID | str | None,
               chunk_ids: Sequence[str]) -> dict[str, ChunkRow]:
    """``{chunk UUID: ChunkRow}`` of the catalogued chunks among ``chunk_ids`` of knowledge base ``kb`` (resolved,
    or its id; None: of any knowledge base)."""
    ids = uuid_strings(chunk_ids)
    if not ids:
        return {}
    kb_id = kb.id if isinstance(kb, KnowledgeBaseRef) else kb
    return {r.chunk_id: _row(r) for r in queries.by_chunk_ids(conn, kb_id, ids)}


def list_chunks(conn: sa.Connection, kb: KnowledgeBaseRef, *, limit: int,
                search: str | None = None) -> tuple[list[ChunkRow], int]:
    """Catalogued chunks in original-id order (``search``: containing that text, case-insensitive), at most
    ``limit``, and how many there are (matching ``search``) in all."""
    rows = queries.listed(conn, kb.id, limit, search)
    total = queries.count(conn, kb.id) if search is None else queries.count_matching(conn, kb.id, search)
    return [_row(r) for r in rows], total


def count(conn: sa.Connection, kb: KnowledgeBaseRef) -> int:
    return queries.count(conn, kb.id)


def store_texts(conn: sa.Connection, kb: KnowledgeBaseRef, texts: dict[str, tuple[str, str | None, str]]) -> int:
    """Catalogue ``{chunk UUID: (original id, title, text)}`` (an HTTP retriever's replies); the number stored."""
    rows = [(chunk, raw, title, text) for chunk, (raw, title, text) in sorted(texts.items())]
    queries.store_texts(conn, kb.id, rows)
    return len(rows)


def own_chunk_ids(conn: sa.Connection, kb: KnowledgeBaseRef, chunk_ids: Sequence[str]) -> set[str]:
    """Those of ``chunk_ids`` that are chunks of the knowledge base's own chunk table (ingested here)."""
    ids = uuid_strings(chunk_ids)
    return queries.own_chunk_ids(conn, kb.id, ids) if ids else set()
