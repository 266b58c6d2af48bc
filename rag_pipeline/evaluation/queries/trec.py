"""Statements of the TREC run file and qrels import / export (:mod:`rag_pipeline.evaluation.trec`): the staging
table a run file is copied into, its checks, its ranked reading, and the external ids."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import sqlalchemy as sa

from rag_pipeline.evaluation.runs.case_queries import copy_rows

STAGING = "trec_run_staging"
STAGING_COLUMNS = ("line", "qid", "case_index", "docno", "chunk_id", "score")
STAGING_TYPES = ("int8", "text", "int4", "text", "uuid", "float8")


def create_staging(conn: sa.Connection) -> None:
    """A temporary table for one run file's lines, dropped when the transaction ends."""
    conn.execute(sa.text(
        f"CREATE TEMPORARY TABLE {STAGING} (line int8 NOT NULL, qid text NOT NULL, case_index int4, "
        "docno text NOT NULL, chunk_id uuid NOT NULL, score float8 NOT NULL) ON COMMIT DROP"))


def copy_staging(conn: sa.Connection, rows: Iterable[Sequence]) -> int:
    """Rows in :data:`STAGING_COLUMNS` order, by binary COPY."""
    return copy_rows(conn, STAGING, STAGING_COLUMNS, rows, STAGING_TYPES)


def index_staging(conn: sa.Connection) -> None:
    conn.execute(sa.text(f"CREATE INDEX ON {STAGING} (case_index) WHERE case_index IS NOT NULL"))
    conn.execute(sa.text(f"ANALYZE {STAGING}"))


def first_duplicate(conn: sa.Connection) -> sa.Row | None:
    """The (topic, docno) pair given twice whose second line comes first: ``qid, docno, first, second``."""
    return conn.execute(sa.text(
        f"SELECT qid, docno, lines[1] AS first, lines[2] AS second FROM ("
        f"  SELECT qid, docno, array_agg(line ORDER BY line) AS lines FROM {STAGING} GROUP BY qid, docno "
        "  HAVING count(*) > 1) d ORDER BY lines[2] LIMIT 1")).first()


def unknown_topics(conn: sa.Connection) -> sa.Row:
    """``topics, lines`` of the run file whose topic is no case of the dataset, and the first such ``qid``s."""
    return conn.execute(sa.text(
        f"SELECT count(DISTINCT qid) AS topics, count(*) AS lines, "
        f"(SELECT array_agg(qid) FROM (SELECT DISTINCT qid FROM {STAGING} WHERE case_index IS NULL "
        "ORDER BY qid LIMIT 5) q) AS examples "
        f"FROM {STAGING} WHERE case_index IS NULL")).one()


def ranked(conn: sa.Connection, first: int, last: int) -> Iterator[sa.Row]:
    """``case_index, chunk_id, score`` of the cases ``first``..``last``, in trec_eval's order: score descending,
    ties by docno descending (byte order, as ``strcmp``)."""
    return iter(conn.execute(sa.text(
        f"SELECT case_index, chunk_id, score FROM {STAGING} WHERE case_index BETWEEN :first AND :last "
        "ORDER BY case_index, score DESC, docno COLLATE \"C\" DESC"), {"first": first, "last": last}))


def remember_staged_ids(conn: sa.Connection, knowledge_base_id) -> None:
    """Record the original id of every staged docno stored under a derived chunk UUID."""
    conn.execute(sa.text(
        "INSERT INTO external_chunk_ids (knowledge_base_id, chunk_id, external_id) "
        f"SELECT DISTINCT :kb, chunk_id, docno FROM {STAGING} WHERE case_index IS NOT NULL "
        "AND docno <> chunk_id::text ON CONFLICT DO NOTHING"), {"kb": knowledge_base_id})


def remember_ids(conn: sa.Connection, knowledge_base_id, pairs: Sequence[tuple[str, str]]) -> None:
    """Record ``(chunk UUID, original id)`` pairs of a knowledge base (a qrels import)."""
    if pairs:
        conn.execute(sa.text(
            "INSERT INTO external_chunk_ids (knowledge_base_id, chunk_id, external_id) "
            "SELECT :kb, c, e FROM unnest(CAST(:chunks AS uuid[]), CAST(:ids AS text[])) AS p(c, e) "
            "ON CONFLICT DO NOTHING"),
            {"kb": knowledge_base_id, "chunks": [c for c, _ in pairs], "ids": [e for _, e in pairs]})


def external_ids(conn: sa.Connection, knowledge_base_id, chunk_ids: Sequence[str]) -> dict[str, str]:
    """``{chunk UUID: original id}`` of those of ``chunk_ids`` that have one."""
    if not chunk_ids:
        return {}
    rows = conn.execute(sa.text(
        "SELECT chunk_id::text AS chunk_id, external_id FROM external_chunk_ids WHERE knowledge_base_id = :kb "
        "AND chunk_id = ANY(CAST(:chunks AS uuid[]))"), {"kb": knowledge_base_id, "chunks": list(chunk_ids)})
    return {r.chunk_id: r.external_id for r in rows}


def run_lines(conn: sa.Connection, run_id, knowledge_base_id) -> Iterator[sa.Row]:
    """Every candidate of a run as ``case_id, docno, rank, score`` (docno: the original id, else the chunk
    UUID), by case and rank, streamed."""
    stream = conn.execution_options(stream_results=True, yield_per=10_000)
    return iter(stream.execute(sa.text(
        "SELECT r.case_id, coalesce(x.external_id, c.chunk_id::text) AS docno, c.rank, c.final_score AS score "
        "FROM retrieval_evaluation_candidate_rows c "
        "JOIN retrieval_evaluation_case_results r ON r.evaluation_run_id = c.evaluation_run_id "
        "AND r.case_index = c.case_index "
        "LEFT JOIN external_chunk_ids x ON x.knowledge_base_id = :kb AND x.chunk_id = c.chunk_id "
        "WHERE c.evaluation_run_id = :run ORDER BY c.case_index, c.rank"),
        {"run": run_id, "kb": knowledge_base_id}))
