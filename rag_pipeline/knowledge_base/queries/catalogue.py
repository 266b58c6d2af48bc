"""SQL of the chunk catalogue (:mod:`rag_pipeline.knowledge_base.catalogue`): the rows of ``external_chunk_ids``
whose ``content`` is known, and the knowledge-base row of an ``external`` knowledge base."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import sqlalchemy as sa

STAGING = "catalogue_staging"
STAGING_COLUMNS = ("line", "chunk_id", "external_id", "title", "content")


def lock_knowledge_base(conn: sa.Connection, name: str) -> sa.Row | None:
    """``id, kind`` of the knowledge base named ``name``, its row locked until the transaction ends."""
    return conn.execute(sa.text("SELECT id, kind FROM knowledge_bases WHERE name = :n FOR UPDATE"), {"n": name}).first()


def insert_external(conn: sa.Connection, kb_id, name: str) -> bool:
    """A new knowledge base of kind ``external`` (nothing ingested: chunk size and counts 0); False when ``name``
    was taken meanwhile."""
    return conn.execute(sa.text(
        "INSERT INTO knowledge_bases (id, name, text_search, chunk_size, chunk_overlap, chunk_count, "
        "avg_chunk_length, kind) VALUES (:id, :n, 'simple', 0, 0, 0, 0, 'external') ON CONFLICT DO NOTHING "
        "RETURNING id"), {"id": kb_id, "n": name}).first() is not None


def own_chunks(conn: sa.Connection, kb_id) -> int:
    """The chunks ingested into a knowledge base (current or replaced)."""
    return conn.execute(sa.text("SELECT count(*) FROM document_chunks WHERE knowledge_base_id = :kb"),
                        {"kb": kb_id}).scalar_one()


def own_chunk_ids(conn: sa.Connection, kb_id, chunk_ids: Sequence[str]) -> set[str]:
    """Those of ``chunk_ids`` (UUID text) that are chunks of the knowledge base's own chunk table."""
    return set(conn.execute(sa.text(
        "SELECT id::text FROM document_chunks WHERE knowledge_base_id = :kb AND id = ANY(CAST(:ids AS uuid[]))"),
        {"kb": kb_id, "ids": list(chunk_ids)}).scalars())


def create_staging(conn: sa.Connection) -> None:
    """A temporary table for one corpus file's documents, dropped when the transaction ends."""
    conn.execute(sa.text(
        f"CREATE TEMPORARY TABLE {STAGING} (line int8 NOT NULL, chunk_id uuid NOT NULL, external_id text NOT NULL, "
        "title text, content text NOT NULL) ON COMMIT DROP"))


def copy_staging(conn: sa.Connection, rows: Iterable[tuple[int, str, str, str | None, str]]) -> int:
    """Rows in :data:`STAGING_COLUMNS` order by COPY (psycopg escapes each field); the number written."""
    raw = conn.connection.driver_connection
    if raw is None:
        raise RuntimeError("COPY needs a checked-out DBAPI connection")
    n = 0
    with raw.cursor() as cur, cur.copy(f"COPY {STAGING} ({', '.join(STAGING_COLUMNS)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
            n += 1
    return n


def first_duplicate(conn: sa.Connection) -> sa.Row | None:
    """The id given twice whose second line comes first: ``external_id, first, second``."""
    return conn.execute(sa.text(
        f"SELECT external_id, lines[1] AS first, lines[2] AS second FROM ("
        f"  SELECT min(external_id) AS external_id, array_agg(line ORDER BY line) AS lines FROM {STAGING} "
        "  GROUP BY chunk_id HAVING count(*) > 1) d ORDER BY lines[2] LIMIT 1")).first()


_NOT_STAGED = f"NOT EXISTS (SELECT 1 FROM {STAGING} s WHERE s.chunk_id = x.chunk_id)"


def replace_from_staging(conn: sa.Connection, kb_id) -> tuple[int, int]:
    """The knowledge base's catalogue becomes the staged documents: the text of a chunk catalogued before and not
    staged is dropped (its derived id stays remembered for exports; a canonical UUID's row goes), the staged ones
    are inserted or updated. ``(rows written, catalogued chunks dropped)``."""
    params = {"kb": kb_id}
    dropped = conn.execute(sa.text(
        "DELETE FROM external_chunk_ids x WHERE x.knowledge_base_id = :kb AND x.content IS NOT NULL "
        f"AND x.external_id = x.chunk_id::text AND {_NOT_STAGED}"), params).rowcount
    dropped += conn.execute(sa.text(
        "UPDATE external_chunk_ids x SET title = NULL, content = NULL WHERE x.knowledge_base_id = :kb "
        f"AND x.content IS NOT NULL AND {_NOT_STAGED}"), params).rowcount
    written = conn.execute(sa.text(
        "INSERT INTO external_chunk_ids (knowledge_base_id, chunk_id, external_id, title, content) "
        f"SELECT :kb, chunk_id, external_id, title, content FROM {STAGING} "
        "ON CONFLICT (knowledge_base_id, chunk_id) DO UPDATE SET external_id = EXCLUDED.external_id, "
        "title = EXCLUDED.title, content = EXCLUDED.content"), params).rowcount
    return written, dropped


def store_texts(conn: sa.Connection, kb_id, rows: Sequence[tuple[str, str, str | None, str]]) -> None:
    """Catalogue ``(chunk UUID, original id, title, text)`` rows (an HTTP retriever's texts): inserted or their
    text updated."""
    if rows:
        conn.execute(sa.text(
            "INSERT INTO external_chunk_ids (knowledge_base_id, chunk_id, external_id, title, content) "
            "SELECT :kb, c, e, t, x FROM unnest(CAST(:chunks AS uuid[]), CAST(:ids AS text[]), "
            "CAST(:titles AS text[]), CAST(:texts AS text[])) AS p(c, e, t, x) "
            "ON CONFLICT (knowledge_base_id, chunk_id) DO UPDATE SET title = coalesce(EXCLUDED.title, "
            "external_chunk_ids.title), content = EXCLUDED.content"),
            {"kb": kb_id, "chunks": [r[0] for r in rows], "ids": [r[1] for r in rows],
             "titles": [r[2] for r in rows], "texts": [r[3] for r in rows]})


def count(conn: sa.Connection, kb_id) -> int:
    """The catalogued chunks of a knowledge base."""
    return conn.execute(sa.text("SELECT count(*) FROM external_chunk_ids WHERE knowledge_base_id = :kb "
                                "AND content IS NOT NULL"), {"kb": kb_id}).scalar_one()


_COLUMNS = ("x.chunk_id::text AS chunk_id, x.external_id, coalesce(x.title, '') AS title, x.content, "
            "x.knowledge_base_id::text AS knowledge_base_id")


def by_chunk_ids(conn: sa.Connection, kb_id, chunk_ids: Sequence[str]) -> Sequence[sa.Row]:
    """The catalogued chunks among ``chunk_ids`` (UUID text); ``kb_id`` None: of any knowledge base."""
    return conn.execute(sa.text(
        f"SELECT {_COLUMNS} FROM external_chunk_ids x WHERE x.chunk_id = ANY(CAST(:chunks AS uuid[])) "
        "AND x.content IS NOT NULL AND (CAST(:kb AS uuid) IS NULL OR x.knowledge_base_id = CAST(:kb AS uuid))"),
        {"kb": None if kb_id is None else str(kb_id), "chunks": list(chunk_ids)}).all()


def listed(conn: sa.Connection, kb_id, limit: int, search: str | None) -> Sequence[sa.Row]:
    """Catalogued chunks in original-id order (``search``: a case-insensitive substring of the title or text)."""
    return conn.execute(sa.text(
        f"SELECT {_COLUMNS} FROM external_chunk_ids x WHERE x.knowledge_base_id = :kb AND x.content IS NOT NULL "
        "AND (CAST(:q AS text) IS NULL OR strpos(lower(x.content), lower(:q)) > 0 "
        "OR strpos(lower(coalesce(x.title, '')), lower(:q)) > 0) "
        "ORDER BY x.external_id COLLATE \"C\" LIMIT :limit"), {"kb": kb_id, "q": search, "limit": limit}).all()


def count_matching(conn: sa.Connection, kb_id, search: str) -> int:
    """How many catalogued chunks :func:`listed` finds for ``search`` without a limit."""
    return conn.execute(sa.text(
        "SELECT count(*) FROM external_chunk_ids x WHERE x.knowledge_base_id = :kb AND x.content IS NOT NULL "
        "AND (strpos(lower(x.content), lower(:q)) > 0 OR strpos(lower(coalesce(x.title, '')), lower(:q)) > 0)"),
        {"kb": kb_id, "q": search}).scalar_one()
