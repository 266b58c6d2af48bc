"""Statements on the per-case results of runs (``retrieval_evaluation_case_results``), and the COPY that writes
them. An unanswerable case's stored metrics read as NULL (:data:`SCORED_METRICS`) and are left out of comparisons."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

import sqlalchemy as sa

from rag_pipeline.contracts.metrics import Metrics
from rag_pipeline.contracts.reports import CaseOverview, CaseReport
from rag_pipeline.evaluation.metrics import METRIC_NAMES
from rag_pipeline.storage.engine import BINARY_COPY_SIGNATURE

UNANSWERABLE_REASON = ("unanswerable case (\"answerable\": false): no chunk is relevant, so no retrieval metric is "
                       "defined; left out of the run's averages (docs/design.md §12.1)")


@contextmanager
def copy_into(conn: sa.Connection, table: str, columns: Sequence[str],
              binary_types: Sequence[str] | None = None) -> Iterator[Callable[[Iterable[Sequence]], int]]:
    """One COPY into ``table`` on the transaction's own psycopg 3 connection, open for the ``with`` block: it gives
    ``write(rows) -> rows written``, to call as often as rows come (the connection runs nothing else meanwhile);
    the COPY ends with the block (with an error: it is aborted). With ``binary_types`` (the columns' PostgreSQL
    types) in binary format, which the server stores without parsing text (faster: bench/RESULTS.md)."""
    raw = conn.connection.driver_connection
    if raw is None:
        raise RuntimeError("COPY needs a checked-out DBAPI connection")
    binary = " WITH (FORMAT BINARY)" if binary_types else ""
    with raw.cursor() as cur, cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN{binary}") as copy:
        if binary_types:
            copy.set_types(list(binary_types))

        def write(rows: Iterable[Sequence]) -> int:
            n = 0
            for row in rows:
                copy.write_row(row)
                n += 1
            return n

        yield write


_BINARY_HEADER = BINARY_COPY_SIGNATURE + struct.pack(">ii", 0, 0)  # no flags, no header extension
_BINARY_TRAILER = struct.pack(">h", -1)


@contextmanager
def copy_binary(conn: sa.Connection, table: str, columns: Sequence[str]) -> Iterator[Callable[[bytes], None]]:
    """One COPY into ``table`` in PostgreSQL's binary format, open for the ``with`` block: it gives
    ``write(block)`` for blocks of whole tuples the caller encoded (a field count, then each field as its length and
    bytes, -1 for NULL); the header and the trailer are written here. The tuples skip the driver's per-row
    adaptation (bench/RESULTS.md, "One click")."""
    raw = conn.connection.driver_connection
    if raw is None:
        raise RuntimeError("COPY needs a checked-out DBAPI connection")
    with raw.cursor() as cur, cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN WITH (FORMAT BINARY)") as copy:
        copy.write(_BINARY_HEADER)
        yield copy.write
        copy.write(_BINARY_TRAILER)


def copy_rows(conn: sa.Connection, table: str, columns: Sequence[str], rows: Iterable[Sequence],
              binary_types: Sequence[str] | None = None) -> int:
    """``rows`` into ``table`` by one COPY (:func:`copy_into`)."""
    with copy_into(conn, table, columns, binary_types) as write:
        return write(rows)


SCORED_METRICS = ", ".join(f"CASE WHEN relevant_chunk_ids <> '[]'::jsonb THEN {m} END AS {m}" for m in METRIC_NAMES)
"""SQL: every metric column, NULL for an unanswerable case."""
_REPORT_COLUMNS = ", ".join(("case_id", "case_index", "question", "k",
                             "relevant_chunk_ids <> '[]'::jsonb AS answerable", "retrieved_chunk_ids",
                             "relevant_chunk_ids", "relevance_grades", "first_relevant_rank",
                             SCORED_METRICS, "miss_reasons"))


def report_page(conn: sa.Connection, run_id, *, after: int, page: int, case_id: str | None) -> list[CaseReport]:
    """Up to ``page`` cases of a run after case index ``after``, in dataset order (``case_id``: only that one),
    without candidates. Runs stored before grades existed were binary: each relevant id grade 1."""
    one_case = " AND case_id = :case" if case_id is not None else ""
    rows = conn.execute(sa.text(
        f"SELECT {_REPORT_COLUMNS} FROM retrieval_evaluation_case_results WHERE evaluation_run_id = :run{one_case} "
        "AND case_index > :last ORDER BY case_index LIMIT :page"),
        {"run": run_id, "last": after, "page": page, "case": case_id})
    return [CaseReport(
        case_id=r.case_id, case_index=r.case_index, question=r.question, k=r.k, answerable=r.answerable,
        retrieved_chunk_ids=r.retrieved_chunk_ids, relevant_chunk_ids=r.relevant_chunk_ids,
        relevance_grades=dict.fromkeys(r.relevant_chunk_ids, 1) if r.relevance_grades is None else r.relevance_grades,
        first_relevant_rank=r.first_relevant_rank,
        metrics=Metrics(**{m: getattr(r, m) for m in METRIC_NAMES}) if r.answerable else None,
        metrics_skipped=None if r.answerable else UNANSWERABLE_REASON, miss_reasons=r.miss_reasons, candidates=[])
        for r in rows]


def case_rows(conn: sa.Connection, run_id, case_id: str | None = None) -> Sequence[sa.RowMapping]:
    """Every case of a run in dataset order (``case_id``: only that one): question, labels, metrics (NULL: an
    unanswerable case), reasons."""
    return conn.execute(sa.text(f"""
SELECT case_index, case_id, question, k, first_relevant_rank, relevant_chunk_ids, relevance_grades, miss_reasons,
       relevant_chunk_ids <> '[]'::jsonb AS answerable, {SCORED_METRICS}
FROM retrieval_evaluation_case_results
WHERE evaluation_run_id = CAST(:run AS uuid) AND (CAST(:case AS text) IS NULL OR case_id = :case)
ORDER BY case_index
"""), {"run": str(run_id), "case": case_id}).mappings().all()


def neighbours(conn: sa.Connection, run_id, case_index: int) -> sa.Row:
    """``previous``, ``next``: the case ids before and after a case index (None at either end)."""
    return conn.execute(sa.text(
        "SELECT (SELECT case_id FROM retrieval_evaluation_case_results WHERE evaluation_run_id = :run "
        "AND case_index < :i ORDER BY case_index DESC LIMIT 1) AS previous, "
        "(SELECT case_id FROM retrieval_evaluation_case_results WHERE evaluation_run_id = :run "
        "AND case_index > :i ORDER BY case_index LIMIT 1) AS next"), {"run": run_id, "i": case_index}).one()


def overview(conn: sa.Connection, run_id, *, worst_first: bool = False, limit: int = 100) -> list[CaseOverview]:
    """Per answerable case: the metrics and the top 3 selected candidates (``worst_first``: lowest nDCG, then RR,
    first)."""
    order = "r.ndcg_at_k, r.reciprocal_rank, r.case_index" if worst_first else "r.case_index"
    rows = conn.execute(sa.text(f"""
        SELECT r.case_index, r.case_id, r.question, r.k, r.first_relevant_rank,
               {', '.join('r.' + m for m in METRIC_NAMES)},
               (SELECT coalesce(json_agg(json_build_object('document_name', c.document_name,
                        'chunk_id', c.chunk_id, 'final_score', c.final_score, 'is_relevant', c.is_relevant,
                        'relevance_grade', c.relevance_grade)
                        ORDER BY c.rank), '[]'::json)
                FROM retrieval_evaluation_candidates c
                WHERE c.evaluation_run_id = r.evaluation_run_id AND c.case_id = r.case_id
                  AND c.is_selected AND c.rank <= 3) AS top3
        FROM retrieval_evaluation_case_results r
        WHERE r.evaluation_run_id = :run AND r.relevant_chunk_ids <> '[]'::jsonb ORDER BY {order} LIMIT :limit"""),
        {"run": run_id, "limit": limit})
    return [CaseOverview(case_index=r.case_index, case_id=r.case_id, question=r.question, k=r.k,
                         first_relevant_rank=r.first_relevant_rank,
                         metrics=Metrics(**{m: getattr(r, m) for m in METRIC_NAMES}), top3=r.top3) for r in rows]


def metrics_of_runs(conn: sa.Connection, run_ids: list[str]) -> Sequence[sa.RowMapping]:
    """``run_id``, ``case_id`` and every metric of each answerable case of the runs (what a paired comparison pairs)."""
    return conn.execute(sa.text(f"""
SELECT evaluation_run_id::text AS run_id, case_id, {', '.join(METRIC_NAMES)}
FROM retrieval_evaluation_case_results WHERE evaluation_run_id = ANY(CAST(:runs AS uuid[]))
  AND relevant_chunk_ids <> '[]'::jsonb
"""), {"runs": run_ids}).mappings().all()


def labels_of_run(conn, run_id) -> Sequence[sa.RowMapping]:
    """``case_id, k, relevant_chunk_ids, relevance_grades`` of every answerable case, in dataset order (``conn``: a
    connection or a session)."""
    return conn.execute(sa.text(
        "SELECT case_id, k, relevant_chunk_ids, relevance_grades FROM retrieval_evaluation_case_results "
        "WHERE evaluation_run_id = CAST(:run_id AS uuid) AND relevant_chunk_ids <> '[]'::jsonb "
        "ORDER BY case_index, case_id"), {"run_id": str(run_id)}).mappings().all()


def judged_counts(conn: sa.Connection, run_id, case_ids: Sequence[str] | None = None) -> Sequence[sa.Row]:
    """Per answerable case of a run (``case_ids``: only those), in dataset order: ``case_id, k`` and the counts
    Judged@k and the pool's judged share read: ``top`` (candidates ranked k or better), ``judged_top``, ``pool``,
    ``judged_pool`` (judged: the candidate has a grade, 0 included)."""
    return conn.execute(sa.text("""
SELECT r.case_id, r.k, count(c.rank) FILTER (WHERE c.rank <= r.k) AS top,
       count(c.rank) FILTER (WHERE c.rank <= r.k AND c.relevance_grade IS NOT NULL) AS judged_top,
       count(c.rank) AS pool, count(c.rank) FILTER (WHERE c.relevance_grade IS NOT NULL) AS judged_pool
FROM retrieval_evaluation_case_results r
LEFT JOIN retrieval_evaluation_candidate_rows c
  ON c.evaluation_run_id = r.evaluation_run_id AND c.case_index = r.case_index
WHERE r.evaluation_run_id = CAST(:run AS uuid) AND r.relevant_chunk_ids <> '[]'::jsonb
  AND (CAST(:cases AS text[]) IS NULL OR r.case_id = ANY(CAST(:cases AS text[])))
GROUP BY r.case_id, r.case_index, r.k
ORDER BY r.case_index
"""), {"run": str(run_id), "cases": None if case_ids is None else list(case_ids)}).all()
