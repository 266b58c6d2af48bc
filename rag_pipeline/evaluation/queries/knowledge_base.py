"""What the evaluation stage and the service read of the knowledge base and the strategy store: label lookups,
chunk text, activity counts; and the session statements (ping, snapshot)."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from rag_pipeline.retrieval import sql as retrieval_sql


def ping(conn: sa.Connection) -> None:
    conn.execute(sa.text("SELECT 1"))


def snapshot(conn: sa.Connection, *, read_only: bool) -> None:
    """Make the transaction just begun one repeatable-read snapshot."""
    conn.execute(sa.text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY" if read_only
                         else "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))


def knowledge_base_row(conn: sa.Connection, kb_id) -> sa.Row:
    """``id, name, text_search, chunk_count, avg_chunk_length`` of a knowledge base."""
    return conn.execute(sa.text(retrieval_sql.KNOWLEDGE_BASE_SQL), {"kb": kb_id}).one()


def activity(conn: sa.Connection, kb) -> sa.Row:
    """``datasets``, ``runs``, ``last_run_at`` of a knowledge base (a row with ``id`` and ``name``)."""
    return conn.execute(sa.text("""
SELECT (SELECT count(DISTINCT d.name) FROM retrieval_evaluation_datasets d WHERE d.knowledge_base_name = :name)
         AS datasets,
       (SELECT count(*) FROM retrieval_evaluation_runs r WHERE r.knowledge_base_id = :kb) AS runs,
       (SELECT max(r.started_at) FROM retrieval_evaluation_runs r WHERE r.knowledge_base_id = :kb) AS last_run_at
"""), {"name": kb.name, "kb": kb.id}).one()


def chunk_texts(conn: sa.Connection, ids: list[str]) -> dict[str, dict]:
    """Chunk id → ``chunk_id, content, ordinal, is_current, document_name`` (``ids``: canonical UUID text)."""
    return {r["chunk_id"]: dict(r) for r in conn.execute(sa.text("""
SELECT c.id::text AS chunk_id, c.content, c.ordinal, c.is_current, d.original_name AS document_name
FROM document_chunks c JOIN documents d ON d.id = c.document_id WHERE c.id = ANY(CAST(:ids AS uuid[]))
"""), {"ids": ids}).mappings()}


def label_chunks(conn: sa.Connection, ids: list[uuid.UUID]) -> dict[uuid.UUID, sa.Row]:
    """The chunks among ``ids``, each with its document's state and, when replaced, its current replacements."""
    return {r.id: r for r in conn.execute(sa.text("""
SELECT c.id, c.knowledge_base_id, k.name AS kb_name, c.document_id, d.original_name, d.status,
       d.publication_status, d.is_deleted, c.is_current, c.char_start, c.char_end, c.replaced_at,
       (SELECT array_agg(n.id::text ORDER BY n.char_start, n.id) FROM document_chunks n
         WHERE n.document_id = c.document_id AND n.is_current AND NOT c.is_current
           AND n.char_start < c.char_end AND c.char_start < n.char_end) AS replacements
FROM document_chunks c JOIN documents d ON d.id = c.document_id JOIN knowledge_bases k ON k.id = c.knowledge_base_id
WHERE c.id = ANY(:ids)
"""), {"ids": ids})}


def documents_and_knowledge_bases(conn: sa.Connection, ids: list[uuid.UUID]) -> dict[uuid.UUID, sa.Row]:
    """The documents (with their current chunks) and knowledge bases among ``ids``, by ``kind``."""
    return {r.id: r for r in conn.execute(sa.text("""
SELECT d.id, 'document' AS kind, k.name AS kb_name, d.original_name,
       (SELECT array_agg(c.id::text ORDER BY c.ordinal, c.id) FROM document_chunks c
         WHERE c.document_id = d.id AND c.is_current) AS chunk_ids
FROM documents d JOIN knowledge_bases k ON k.id = d.knowledge_base_id WHERE d.id = ANY(:ids)
UNION ALL
SELECT k.id, 'knowledge_base', k.name, NULL, NULL FROM knowledge_bases k WHERE k.id = ANY(:ids)
"""), {"ids": ids})}


def count_not_chunks_of(conn: sa.Connection, kb_id, ids: list) -> int:
    """How many of ``ids`` are not chunks (current or not) of the knowledge base."""
    return conn.execute(sa.text(
        "SELECT count(*) FROM unnest(CAST(:ids AS uuid[])) AS u(id) "
        "WHERE NOT EXISTS (SELECT 1 FROM document_chunks c WHERE c.id = u.id AND c.knowledge_base_id = :kb)"
    ), {"ids": ids, "kb": kb_id}).scalar_one()


def stored_params_hash(conn: sa.Connection, version: str) -> str | None:
    """The parameters hash a strategy version is stored with (None: not stored)."""
    return conn.execute(sa.text("SELECT params_hash FROM retrieval_strategies WHERE version = :v"),
                        {"v": version}).scalar()
