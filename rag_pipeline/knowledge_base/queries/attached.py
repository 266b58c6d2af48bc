"""SQL on an attached knowledge base (the user's tables, read only) and its row in the project's database.

Every table and column name comes from the mapping and is written as a quoted identifier (:func:`quote`), never
spliced as given; values (the document filter's, the knowledge-base value, ids) are bind parameters. Every statement
on the user's database runs in a transaction begun by :func:`begin_read_only`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from rag_pipeline.contracts.attached import AttachedMapping

_PREPARER = postgresql.dialect().identifier_preparer


def quote(name: str) -> str:
    """A column name as a quoted identifier (``"a""b"`` for ``a"b``)."""
    return _PREPARER.quote_identifier(name)


def quote_table(name: str) -> str:
    """A table name, ``schema.table`` split at its last dot, each part quoted."""
    schema, dot, table = name.rpartition(".")
    return f"{quote(schema)}.{quote(table)}" if dot and schema else quote(name)


@dataclass(frozen=True)
class Names:
    """The SQL fragments of a mapping: ``c`` is the chunks table, ``d`` the documents table (when mapped)."""

    mapping: AttachedMapping

    def col(self, name: str, alias: str = "c") -> str:
        return f"{alias}.{quote(name)}"

    @property
    def filter_alias(self) -> str:
        return "d" if self.mapping.documents_table else "c"

    @property
    def source(self) -> str:
        """``FROM`` of the chunks (joined to their documents)."""
        m = self.mapping
        out = f"{quote_table(m.chunks_table)} AS c"
        if m.documents_table:
            out += (f" JOIN {quote_table(m.documents_table)} AS d "
                    f"ON d.{quote(m.documents_key)} = c.{quote(m.document_id)}")
        return out

    @property
    def scope(self) -> str:
        """The rows of the knowledge base (its column = the value), or ``true``."""
        m = self.mapping
        if m.knowledge_base_column is None:
            return "true"
        return f"CAST({self.col(m.knowledge_base_column)} AS text) = CAST(:kb_value AS text)"

    @property
    def searchable(self) -> str:
        """The document filter (every condition), bind parameters ``:f0``, ``:f1`` ..."""
        parts = []
        for i, cond in enumerate(self.mapping.document_filter):
            column = self.col(cond.column, self.filter_alias)
            parts.append(f"CAST({column} AS text) = CAST(:f{i} AS text)" if isinstance(cond.equals, str)
                         else f"{column} = :f{i}")
        return " AND ".join(parts) or "true"

    def params(self) -> dict[str, object]:
        out: dict[str, object] = {f"f{i}": c.equals for i, c in enumerate(self.mapping.document_filter)}
        if self.mapping.knowledge_base_column is not None:
            out["kb_value"] = self.mapping.knowledge_base_value
        return out

    @property
    def chunk_id(self) -> str:
        return f"CAST({self.col(self.mapping.chunk_id)} AS text)"

    @property
    def document_id(self) -> str:
        return f"CAST({self.col(self.mapping.document_id)} AS text)"

    @property
    def document_name(self) -> str:
        m = self.mapping
        if m.documents_table and m.document_name:
            return f"coalesce(CAST(d.{quote(m.document_name)} AS text), '')"
        return "''"

    @property
    def tsvector(self) -> str:
        """The chunk's tsvector: the mapped column, or computed from the text with the questions' configuration."""
        m = self.mapping
        if m.tsvector:
            return self.col(m.tsvector)
        return f"to_tsvector(CAST(:cfg AS regconfig), {self.col(m.text)})"


def begin_read_only(conn: sa.Connection) -> None:
    """The first statement of every transaction on the user's database: one snapshot, read only."""
    conn.execute(sa.text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"))


def relation_exists(conn: sa.Connection, table: str) -> bool:
    return conn.execute(sa.text("SELECT to_regclass(:t) IS NOT NULL"), {"t": quote_table(table)}).scalar_one()


def column_types(conn: sa.Connection, table: str) -> dict[str, str]:
    """``{column: type}`` of an existing table."""
    return {r.attname: r.type for r in conn.execute(sa.text(
        "SELECT attname, format_type(atttypid, atttypmod) AS type FROM pg_attribute "
        "WHERE attrelid = to_regclass(:t) AND attnum > 0 AND NOT attisdropped"), {"t": quote_table(table)})}


def indexed_columns(conn: sa.Connection, table: str) -> dict[str, set[str]]:
    """``{column: {index access methods}}`` of the plain-column indexes of a table."""
    out: dict[str, set[str]] = {}
    for r in conn.execute(sa.text(
            "SELECT a.attname, am.amname FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid "
            "JOIN pg_am am ON am.oid = ic.relam JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(:t)"), {"t": quote_table(table)}):
        out.setdefault(r.attname, set()).add(r.amname)
    return out


def content(conn: sa.Connection, names: Names) -> sa.Row:
    """``rows`` (the chunks table's rows in the knowledge base) and ``fingerprint``: SHA-256 over every row's
    mapped columns and whether the filter lets it be retrieved, in chunk-id order."""
    m = names.mapping
    parts = [names.chunk_id, names.document_id, f"CAST({names.col(m.text)} AS text)", names.document_name,
             f"CAST(({names.searchable}) AS text)"]
    if m.embedding:
        parts.append(f"CAST({names.col(m.embedding)} AS text)")
    if m.tsvector:
        parts.append(f"CAST({names.col(m.tsvector)} AS text)")
    row_text = "concat_ws(E'\\x1f', " + ", ".join(parts) + ")"
    return conn.execute(sa.text(
        f"SELECT count(*) AS rows, encode(sha256(convert_to(coalesce(string_agg(md5({row_text}), '' "
        f"ORDER BY {names.col(m.chunk_id)}), ''), 'UTF8')), 'hex') AS fingerprint "
        f"FROM {names.source} WHERE {names.scope}"), names.params()).one()


def chunks_by_id(conn: sa.Connection, names: Names, ids: Sequence[str]) -> Sequence[sa.Row]:
    """``chunk_id, document_id, document_name, text, searchable`` of the listed chunk ids (as text)."""
    m = names.mapping
    return conn.execute(sa.text(
        f"SELECT {names.chunk_id} AS chunk_id, {names.document_id} AS document_id, "
        f"{names.document_name} AS document_name, CAST({names.col(m.text)} AS text) AS text, "
        f"coalesce(({names.searchable}), false) AS searchable FROM {names.source} "
        f"WHERE {names.scope} AND {names.chunk_id} = ANY(CAST(:ids AS text[]))"),
        {**names.params(), "ids": list(ids)}).all()


def list_chunks(conn: sa.Connection, names: Names, limit: int, offset: int, search: str | None) -> Sequence[sa.Row]:
    """Searchable chunks in chunk-id order (``search``: a case-insensitive substring of the text)."""
    m = names.mapping
    return conn.execute(sa.text(
        f"SELECT {names.chunk_id} AS chunk_id, {names.document_id} AS document_id, "
        f"{names.document_name} AS document_name, CAST({names.col(m.text)} AS text) AS text FROM {names.source} "
        f"WHERE {names.scope} AND {names.searchable} AND (CAST(:q AS text) IS NULL OR "
        f"strpos(lower(CAST({names.col(m.text)} AS text)), lower(:q)) > 0) "
        f"ORDER BY {names.col(m.chunk_id)} LIMIT :limit OFFSET :offset"),
        {**names.params(), "q": search, "limit": limit, "offset": offset}).all()


# The project's own database: the knowledge base row of an attached one.
_ATTACH_SQL = """
INSERT INTO knowledge_bases (id, name, text_search, chunk_size, chunk_overlap, chunk_count, avg_chunk_length, kind,
                             attached_mapping, url_env)
VALUES (:id, :name, :ts, 0, 0, :rows, 0, 'attached', CAST(:mapping AS jsonb), :env)
ON CONFLICT (name) DO UPDATE SET text_search = EXCLUDED.text_search, chunk_count = EXCLUDED.chunk_count,
    attached_mapping = EXCLUDED.attached_mapping, url_env = EXCLUDED.url_env
WHERE knowledge_bases.kind = 'attached'
RETURNING id
"""


def record_attached(conn: sa.Connection, kb_id, name: str, mapping: AttachedMapping, url_env: str,
                    rows: int) -> bool:
    """Insert or update the knowledge base row; False when ``name`` is a knowledge base of the project's own."""
    return conn.execute(sa.text(_ATTACH_SQL), {
        "id": kb_id, "name": name, "ts": mapping.text_search, "rows": rows, "env": url_env,
        "mapping": json.dumps(mapping.model_dump(mode="json"))}).first() is not None


def remembered_ids(conn: sa.Connection, kb_id, chunk_ids: Sequence[str]) -> dict[str, str]:
    """``{chunk UUID: the user's id}`` of the listed chunk UUIDs that were derived from an id that is no UUID."""
    return {r.chunk_id: r.external_id for r in conn.execute(sa.text(
        "SELECT chunk_id::text AS chunk_id, external_id FROM external_chunk_ids WHERE knowledge_base_id = :kb "
        "AND chunk_id = ANY(CAST(:chunks AS uuid[]))"), {"kb": kb_id, "chunks": list(chunk_ids)})}


def remember_ids(conn: sa.Connection, kb_id, pairs: Sequence[tuple[str, str]]) -> None:
    """Keep ``(chunk UUID, the user's id)`` pairs (ids that are no UUID) so labels and pools read back as given."""
    if pairs:
        conn.execute(sa.text(
            "INSERT INTO external_chunk_ids (knowledge_base_id, chunk_id, external_id) "
            "SELECT :kb, c, e FROM unnest(CAST(:chunks AS uuid[]), CAST(:ids AS text[])) AS p(c, e) "
            "ON CONFLICT DO NOTHING"), {"kb": kb_id, "chunks": [c for c, _ in pairs], "ids": [e for _, e in pairs]})


def count_chunks(conn: sa.Connection, names: Names) -> int:
    """The searchable chunks of the knowledge base."""
    return conn.execute(sa.text(f"SELECT count(*) FROM {names.source} WHERE {names.scope} AND {names.searchable}"),
                        names.params()).scalar_one()


def attached_names(conn: sa.Connection) -> list[str]:
    """The names of the attached knowledge bases."""
    return list(conn.execute(sa.text("SELECT name FROM knowledge_bases WHERE kind = 'attached' ORDER BY name")
                             ).scalars())


def attached_row(conn: sa.Connection, kb_id) -> sa.Row | None:
    """``kind, attached_mapping, url_env`` of a knowledge base."""
    return conn.execute(sa.text("SELECT kind, attached_mapping, url_env FROM knowledge_bases WHERE id = :id"),
                        {"id": kb_id}).first()
