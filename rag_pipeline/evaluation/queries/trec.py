"""Statements of the TREC run file and qrels import / export (:mod:`rag_pipeline.evaluation.trec`): the staging
table a run file is copied into, its checks, its ranked reading, and the external ids."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import sqlalchemy as sa

STAGING = "trec_run_staging"
STAGING_COLUMNS = ("line", "qid", "case_index", "docno", "chunk_id", "score")
SORT_MEMORY = "256MB"
"""``work_mem`` of the import's transaction: ranking a million lines sorts in memory."""
_BUFFER_ROWS = 10_000


def create_staging(conn: sa.Connection) -> None:
    """A temporary table for one run file's lines, dropped when the transaction ends."""
    conn.execute(sa.text(
        f"CREATE TEMPORARY TABLE {STAGING} (line int8 NOT NULL, qid text NOT NULL, case_index int4, "
        "docno text NOT NULL, chunk_id uuid NOT NULL, score float8 NOT NULL) ON COMMIT DROP"))
    conn.execute(sa.text(f"SET LOCAL work_mem = '{SORT_MEMORY}'"))


def _text(value: str) -> str:
    """A field of COPY's text format (the fields of a whitespace-split line hold no tab or line break)."""
    return value.replace("\\", "\\\\") if "\\" in value else value


def copy_staging(conn: sa.Connection, rows: Iterable[tuple[int, str, int | None, str, str, float]]) -> int:
    """Rows in :data:`STAGING_COLUMNS` order (the chunk id as UUID text), by COPY in text format, written
    :data:`_BUFFER_ROWS` at a time (a row costs a string, not a call)."""
    raw = conn.connection.driver_connection
    if raw is None:
        raise RuntimeError("COPY needs a checked-out DBAPI connection")
    n, buffer = 0, []
    with raw.cursor() as cur, cur.copy(f"COPY {STAGING} ({', '.join(STAGING_COLUMNS)}) FROM STDIN") as copy:
        for line, qid, case, docno, chunk, score in rows:
            case_text = "\\N" if case is None else str(case)
            buffer.append(f"{line}\t{_text(qid)}\t{case_text}\t{_text(docno)}\t{chunk}\t{score!r}\n")
            if len(buffer) == _BUFFER_ROWS:
                copy.write("".join(buffer))
                n += len(buffer)
                buffer.clear()
        copy.write("".join(buffer))
    return n + len(buffer)


def first_duplicate(conn: sa.Connection) -> sa.Row | None:
    """The (topic, docno) pair given twice whose second line comes first: ``qid, docno, first, second``."""
    return conn.execute(sa.text(
        f"SELECT qid, docno, lines[1] AS first, lines[2] AS second FROM ("
        f"  SELECT qid, docno, array_agg(line ORDER BY line) AS lines FROM {STAGING} GROUP BY qid, docno "
        "  HAVING count(*) > 1) d ORDER BY lines[2] LIMIT 1")).first()


def store_candidates(conn: sa.Connection, run_id, ks: Sequence[int], grades: Sequence[tuple[int, str, int]]) -> int:
    """Rank every staged line of a case of the dataset in trec_eval's order (score descending, ties by docno
    descending, byte order as ``strcmp``) into the run's candidate rows: selected when within the case's k
    (``ks[case_index]``), with the case's judged grade (``grades``: ``(case_index, chunk id, grade)``). Returns the
    rows written."""
    return conn.execute(sa.text(f"""
INSERT INTO retrieval_evaluation_candidate_rows (evaluation_run_id, case_index, chunk_id, rank, final_score,
    is_selected, relevance_grade)
SELECT :run, s.case_index, s.chunk_id, s.rank, s.score, s.rank <= k.k, g.grade
FROM (SELECT case_index, chunk_id, score,
             row_number() OVER (PARTITION BY case_index ORDER BY score DESC, docno COLLATE "C" DESC) AS rank
      FROM {STAGING} WHERE case_index IS NOT NULL) s
JOIN unnest(CAST(:ks AS int4[])) WITH ORDINALITY AS k(k, ord) ON k.ord = s.case_index + 1
LEFT JOIN unnest(CAST(:g_case AS int4[]), CAST(:g_chunk AS uuid[]), CAST(:g_grade AS int2[])) AS g(case_index,
    chunk_id, grade) ON g.case_index = s.case_index AND g.chunk_id = s.chunk_id"""),
        {"run": run_id, "ks": list(ks), "g_case": [g[0] for g in grades], "g_chunk": [g[1] for g in grades],
         "g_grade": [g[2] for g in grades]}).rowcount


def scored_candidates(conn: sa.Connection, run_id, depths: Sequence[int]) -> Sequence[sa.Row]:
    """What the metrics and the miss reasons of a run read of its pools: ``case_index, chunk_id, rank,
    final_score`` of each case's first ``depths[case_index]`` candidates and of its relevant ones, by case and
    rank."""
    return conn.execute(sa.text(
        "SELECT c.case_index, c.chunk_id::text AS chunk_id, c.rank, c.final_score "
        "FROM retrieval_evaluation_candidate_rows c "
        "JOIN unnest(CAST(:depths AS int4[])) WITH ORDINALITY AS d(depth, ord) ON d.ord = c.case_index + 1 "
        "WHERE c.evaluation_run_id = :run AND (c.rank <= d.depth OR c.relevance_grade >= 1) "
        "ORDER BY c.case_index, c.rank"), {"run": run_id, "depths": list(depths)}).all()


def remember_staged_ids(conn: sa.Connection, knowledge_base_id) -> None:
    """Record the original id of every staged docno stored under a derived chunk UUID."""
    conn.execute(sa.text(
        "INSERT INTO external_chunk_ids (knowledge_base_id, chunk_id, external_id) "
        f"SELECT DISTINCT :kb, chunk_id, docno FROM {STAGING} WHERE case_index IS NOT NULL "
        f"AND docno <> chunk_id::text ON CONFLICT DO NOTHING"), {"kb": knowledge_base_id})


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
