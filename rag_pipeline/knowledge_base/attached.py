"""Attached knowledge bases: an existing PostgreSQL database of the user's, searched read-only through a mapping
(docs/evaluating.md, "Your own retriever"). Its URL is read from an environment variable whose *name* is stored;
the URL and its password are never stored or printed. Nothing is ever created or written there: the sessions are
read-only (``default_transaction_read_only``) and every transaction starts ``SET TRANSACTION ... READ ONLY``."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
import yaml
from pydantic import ValidationError

from rag_pipeline.contracts.attached import AttachedContent, AttachedMapping, AttachResult
from rag_pipeline.contracts.errors import BadInputError, DatabaseUnavailableError
from rag_pipeline.knowledge_base import chunking, textsearch
from rag_pipeline.knowledge_base.chunk_lookup import ChunkRow
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError, KnowledgeBaseRef
from rag_pipeline.knowledge_base.queries import attached as queries
from rag_pipeline.knowledge_base.queries.attached import Names
from rag_pipeline.storage.engine import DatabaseUnreachableError, first_line, read_only_engine
from rag_pipeline.storage.ids import as_uuid, external_chunk_uuid
from rag_pipeline.storage.names import KNOWLEDGE_BASE, check_name
from rag_pipeline.storage.urls import mask_secrets, mask_url

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class AttachError(BadInputError, ValueError):
    """A mapping that does not fit the user's database, or a URL variable that is not set; nothing is stored."""


@dataclass(frozen=True)
class AttachedKnowledgeBase:
    kb: KnowledgeBaseRef
    mapping: AttachedMapping
    url_env: str

    @property
    def names(self) -> Names:
        return Names(self.mapping)


def read_mapping(path: str | os.PathLike | None) -> AttachedMapping:
    """The mapping file (YAML or JSON; every key optional, the default is the original design's schema)."""
    if path is None:
        return AttachedMapping()
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise AttachError(f"{path}: cannot read the mapping: {exc}") from None
    if not isinstance(data, dict):
        raise AttachError(f"{path}: the mapping must be an object of table and column names")
    try:
        return AttachedMapping.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise AttachError(f"{path}: field {where!r}: {first['msg']}") from None


def user_url(url_env: str, knowledge_base: str, environ: Mapping[str, str] | None = None) -> str:
    value = (os.environ if environ is None else environ).get(url_env, "")
    if not value:
        raise AttachError(f"environment variable {url_env} (the database URL of attached knowledge base "
                          f"{knowledge_base!r}) is not set")
    return value


def load(conn: sa.Connection, kb: KnowledgeBaseRef) -> AttachedKnowledgeBase | None:
    """The attached knowledge base ``kb`` is, or None for one of the project's own."""
    if kb.kind != "attached":
        return None
    row = queries.attached_row(conn, kb.id)
    if row is None or row.attached_mapping is None:
        raise KnowledgeBaseError(f"attached knowledge base {kb.name!r} has no mapping recorded")
    return AttachedKnowledgeBase(kb, AttachedMapping.model_validate(row.attached_mapping), row.url_env)


@contextlib.contextmanager
def read_only(attached: AttachedKnowledgeBase | str,
              environ: Mapping[str, str] | None = None) -> Iterator[sa.Connection]:
    """A read-only, repeatable-read transaction on the user's database (rolled back at the end)."""
    url = (user_url(attached.url_env, attached.kb.name, environ) if isinstance(attached, AttachedKnowledgeBase)
           else attached)
    try:
        conn = read_only_engine(url).connect()
    except sa.exc.OperationalError as exc:
        where = (f" (attached knowledge base {attached.kb.name!r}, ${attached.url_env})"
                 if isinstance(attached, AttachedKnowledgeBase) else "")
        raise DatabaseUnreachableError(f"cannot reach the database {mask_url(url)}{where}: {first_line(exc)}") \
            from None
    try:
        with conn.begin() as tx:
            queries.begin_read_only(conn)
            yield conn
            tx.rollback()
    finally:
        conn.close()


def check_mapping(conn: sa.Connection, mapping: AttachedMapping) -> list[str]:
    """Raise :class:`AttachError` naming the first table or column the user's database lacks; the warnings: legs
    that scan without an index (said once, at attach and at each run)."""
    m = mapping
    textsearch.regconfig(m.text_search)
    if (m.knowledge_base_column is None) != (m.knowledge_base_value is None):
        raise AttachError("mapping fields 'knowledge_base_column' and 'knowledge_base_value' go together")
    columns: dict[str, dict[str, str]] = {}
    for table in m.tables():
        if not queries.relation_exists(conn, table):
            raise AttachError(f"table {table!r} does not exist in the attached database (or this role cannot see it)")
        columns[table] = queries.column_types(conn, table)
    wanted = [(m.chunks_table, f, getattr(m, f)) for f in ("chunk_id", "document_id", "text", "embedding",
                                                            "tsvector", "knowledge_base_column")]
    if m.documents_table:
        wanted += [(m.documents_table, f, getattr(m, f)) for f in ("documents_key", "document_name")]
    filter_table = m.documents_table or m.chunks_table
    wanted += [(filter_table, f"document_filter[{i}].column", c.column) for i, c in enumerate(m.document_filter)]
    for table, field, column in wanted:
        if column is not None and column not in columns[table]:
            raise AttachError(f"column {column!r} (mapping field {field!r}) does not exist in table {table!r}")
    chunk_columns = columns[m.chunks_table]
    if m.embedding and not chunk_columns[m.embedding].startswith("vector"):
        raise AttachError(f"column {m.embedding!r} of table {m.chunks_table!r} is {chunk_columns[m.embedding]}, "
                          "not a pgvector vector")
    if m.tsvector and chunk_columns[m.tsvector] != "tsvector":
        raise AttachError(f"column {m.tsvector!r} of table {m.chunks_table!r} is {chunk_columns[m.tsvector]}, "
                          "not a tsvector")
    indexes = queries.indexed_columns(conn, m.chunks_table)
    warnings = []
    if m.embedding and not indexes.get(m.embedding, set()) & {"hnsw", "ivfflat"}:
        warnings.append(f"the vector leg scans every row of {m.chunks_table!r}: column {m.embedding!r} has no "
                        "HNSW or IVFFlat index (exact search; nothing is created in your database)")
    if not m.tsvector or not indexes.get(m.tsvector, set()) & {"gin", "gist"}:
        what = f"column {m.tsvector!r} has no GIN index" if m.tsvector else "no tsvector column is mapped"
        warnings.append(f"the keyword leg scans every row of {m.chunks_table!r}: {what} (nothing is created in "
                        "your database)")
    return warnings


def content(conn: sa.Connection, mapping: AttachedMapping) -> AttachedContent:
    row = queries.content(conn, Names(mapping))
    return AttachedContent(table=mapping.chunks_table, rows=int(row.rows), fingerprint=row.fingerprint)


def attach(engine: sa.Engine, name: str, url_env: str, mapping: AttachedMapping,
           environ: Mapping[str, str] | None = None) -> AttachResult:
    """Check ``mapping`` on the database at ``$url_env`` (read only), then record the knowledge base (kind
    ``attached``, the mapping, the variable's name) in the project's database."""
    check_name(KNOWLEDGE_BASE, name)
    if not re.match(ENV_NAME, url_env):
        raise AttachError(f"--url-env {mask_secrets(url_env)!r} is not an environment variable name (give the "
                          "variable's name, never the URL)")
    url = user_url(url_env, name, environ)
    with read_only(url) as conn:
        warnings = check_mapping(conn, mapping)
        seen = content(conn, mapping)
    kb_id = chunking.knowledge_base_id(name)
    with engine.begin() as conn:
        if not queries.record_attached(conn, kb_id, name, mapping, url_env, seen.rows):
            raise KnowledgeBaseError(f"knowledge base {name!r} exists and was ingested into this project; attach "
                                     "under another name")
    return AttachResult(knowledge_base=name, knowledge_base_id=str(kb_id), url_env=url_env, url=mask_url(url),
                        mapping=mapping, content=seen, warnings=warnings)


def project_id(kb_name: str, user_id: str) -> tuple[str, bool]:
    """The chunk UUID a user's chunk id is stored as (a canonical UUID is itself; any other id its uuid5, as a TREC
    document id's: ``evaluation.trec.lines.chunk_uuid``) and whether it is derived."""
    chunk, derived = external_chunk_uuid(kb_name, user_id)
    return str(chunk), derived


def user_ids(conn: sa.Connection, attached: AttachedKnowledgeBase, labels: Sequence[str]) -> dict[str, str]:
    """``{label: the user's chunk id}`` (a derived label's remembered id; any other label is itself)."""
    uuids = sorted({label for label in labels if as_uuid(label) is not None})
    remembered = queries.remembered_ids(conn, attached.kb.id, uuids) if uuids else {}
    return {label: remembered.get(label, label) for label in labels}


def remember(conn: sa.Connection, kb: KnowledgeBaseRef, user_chunk_ids: Sequence[str]) -> dict[str, str]:
    """``{user id: chunk UUID}`` of ``user_chunk_ids``; the derived ones are remembered (``external_chunk_ids``)."""
    out, derived = {}, []
    for raw in user_chunk_ids:
        chunk, is_derived = project_id(kb.name, raw)
        out[raw] = chunk
        if is_derived:
            derived.append((chunk, raw))
    queries.remember_ids(conn, kb.id, sorted(set(derived)))
    return out


def chunk_rows(conn: sa.Connection, attached: AttachedKnowledgeBase, chunk_ids: Sequence[str]) -> dict[str, ChunkRow]:
    """``{chunk UUID: ChunkRow}`` of the listed chunk UUIDs found in the user's table (``ordinal`` -1: the user's
    table has none; the character span is the whole text)."""
    ids = user_ids(conn, attached, list(chunk_ids))
    with read_only(attached) as user:
        rows = {r.chunk_id: r for r in queries.chunks_by_id(user, attached.names, sorted(set(ids.values())))}
    return {label: _chunk_row(label, rows[raw]) for label, raw in ids.items() if raw in rows}


def _chunk_row(chunk_id: str, r) -> ChunkRow:
    return ChunkRow(chunk_id, r.document_id, r.document_name, -1, 0, len(r.text), r.text)


def list_chunks(conn: sa.Connection, attached: AttachedKnowledgeBase, *, limit: int,
                search: str | None = None) -> tuple[list[ChunkRow], int]:
    """The searchable chunks in chunk-id order (``search``: containing that text, case-insensitive), at most
    ``limit``, and how many are searchable in all."""
    with read_only(attached) as user:
        rows = queries.list_chunks(user, attached.names, limit, 0, search)
        total = queries.count_chunks(user, attached.names)
    mapped = remember(conn, attached.kb, [r.chunk_id for r in rows])
    return [_chunk_row(mapped[r.chunk_id], r) for r in rows], total


def find_chunks_anywhere(conn: sa.Connection, chunk_ids: Sequence[str]) -> dict[str, ChunkRow]:
    """The listed chunk UUIDs found in any attached knowledge base whose URL variable is set (the console's chunk
    text, which knows the id alone); a database that cannot be reached is left out."""
    from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base  # noqa: PLC0415

    found: dict[str, ChunkRow] = {}
    for name in queries.attached_names(conn):
        wanted = [i for i in chunk_ids if i not in found]
        if not wanted:
            break
        user_kb = load(conn, resolve_knowledge_base(conn, name))
        if user_kb is None or not os.environ.get(user_kb.url_env):
            continue
        try:
            found |= chunk_rows(conn, user_kb, wanted)
        except (AttachError, sa.exc.SQLAlchemyError, DatabaseUnavailableError):
            continue
    return found


def describe(engine: sa.Engine, kb: KnowledgeBaseRef, environ: Mapping[str, str] | None = None) -> AttachResult:
    """An attached knowledge base as ``kb attach`` printed it, its mapping checked and its content read now."""
    with engine.connect() as conn:
        found = load(conn, kb)
    if found is None:
        raise KnowledgeBaseError(f"knowledge base {kb.name!r} is not attached")
    url = user_url(found.url_env, kb.name, environ)
    with read_only(found, environ) as user:
        warnings = check_mapping(user, found.mapping)
        seen = content(user, found.mapping)
    return AttachResult(knowledge_base=kb.name, knowledge_base_id=str(kb.id), url_env=found.url_env,
                        url=mask_url(url), mapping=found.mapping, content=seen, warnings=warnings)
