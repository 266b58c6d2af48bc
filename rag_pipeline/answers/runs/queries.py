"""Statements on the answer tables (docs/design.md §12.6) and the scorer's one chunk lookup, written out; the
metric columns in :data:`~rag_pipeline.contracts.answers.ANSWER_METRIC_NAMES` order (a test holds them equal)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import psycopg
import sqlalchemy as sa

from rag_pipeline.knowledge_base.queries.documents import SEARCHABLE_DOCUMENT_SQL

_CITED_SQL = (f"SELECT c.id::text AS id, c.content, (c.is_current AND {SEARCHABLE_DOCUMENT_SQL}) AS searchable "
              "FROM document_chunks c JOIN documents d ON d.id = c.document_id "
              "WHERE c.knowledge_base_id = CAST(:kb AS uuid) AND c.id = ANY(CAST(:ids AS uuid[]))")
_RUN_SELECT = """
SELECT r.id, r.created_at, d.name AS dataset, d.content_hash AS dataset_version, r.dataset_id,
       kb.name AS knowledge_base, r.knowledge_base_id, r.knowledge_base_version, r.answerer, r.answerer_version,
       r.scoring_version, r.scoring, r.answers_sha256, r.rescored_from, r.summary
FROM answer_runs r
JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
JOIN knowledge_bases kb ON kb.id = r.knowledge_base_id
"""
_RUN_FILTER = """
WHERE (CAST(:dataset AS text) IS NULL OR d.name = :dataset)
  AND (CAST(:kb AS uuid) IS NULL OR r.knowledge_base_id = CAST(:kb AS uuid))
  AND (CAST(:answerer AS text) IS NULL OR r.answerer = :answerer)
"""
INSERT_RUN = sa.text("""
INSERT INTO answer_runs (id, dataset_id, knowledge_base_id, knowledge_base_version, answerer, answerer_version,
    scoring_version, scoring, answers_sha256, rescored_from, case_count, answered, exact_match, f1, answer_contains,
    key_point_recall, citation_precision, citation_recall, citation_validity, sentence_citation_coverage,
    lexical_support, answer_score, refusal_recall, false_refusal_rate, summary, partition_key, dagster_run_id)
VALUES (:id, :dataset_id, :knowledge_base_id, :knowledge_base_version, :answerer, :answerer_version,
    :scoring_version, CAST(:scoring AS jsonb), :answers_sha256, :rescored_from, :case_count, :answered, :exact_match,
    :f1, :answer_contains, :key_point_recall, :citation_precision, :citation_recall, :citation_validity,
    :sentence_citation_coverage, :lexical_support, :answer_score, :refusal_recall, :false_refusal_rate,
    CAST(:summary AS jsonb), :partition_key, :dagster_run_id)
RETURNING created_at
""")
INSERTED_METRIC_COLUMNS = ("exact_match", "f1", "answer_contains", "key_point_recall", "citation_precision",
                           "citation_recall", "citation_validity", "sentence_citation_coverage", "lexical_support",
                           "answer_score")
"""The metric columns the run insert and the case COPY name, in their order."""
CASE_COLUMNS = ("run_id", "case_id", "case_index", "verdict", "refused", *INSERTED_METRIC_COLUMNS, "record", "result")
"""The columns of :func:`copy_cases`' rows, in order."""


def insert_run(conn: sa.Connection, values: dict) -> object:
    """Insert one run row; returns its ``created_at``."""
    return conn.execute(INSERT_RUN, values).scalar_one()


def copy_cases(conn: sa.Connection, rows: Iterable[Sequence]) -> int:
    """A run's case rows (:data:`CASE_COLUMNS` order; ``record`` and ``result`` as JSON text, ``record`` None for a
    case without an answer line) by one COPY; how many."""
    statement = f"COPY answer_case_results ({', '.join(CASE_COLUMNS)}) FROM STDIN"
    raw = conn.connection.driver_connection  # the transaction's own psycopg connection, as the retrieval COPY
    if raw is None:
        raise RuntimeError("COPY needs a checked-out DBAPI connection")
    n = 0
    try:
        with raw.cursor() as cur, cur.copy(statement) as copy:
            for row in rows:
                copy.write_row(row)
                n += 1
    except psycopg.Error as exc:  # raised as a statement through SQLAlchemy raises it (IntegrityError, ...)
        raise sa.exc.DBAPIError.instance(statement, None, exc, psycopg.Error) from exc
    return n


def run_row(conn: sa.Connection, run_id) -> sa.Row | None:
    return conn.execute(sa.text(_RUN_SELECT + "WHERE r.id = CAST(:id AS uuid)"), {"id": str(run_id)}).first()


def runs_with_prefix(conn: sa.Connection, prefix: str) -> Sequence[sa.Row]:
    """The (at most three) runs whose id text starts with ``prefix``."""
    return conn.execute(sa.text("SELECT id, created_at, answerer FROM answer_runs WHERE id::text LIKE :p "
                                "ORDER BY id LIMIT 3"), {"p": prefix + "%"}).all()


def list_runs(conn: sa.Connection, *, dataset: str | None, kb_id, answerer: str | None, limit: int,
              offset: int) -> tuple[int, Sequence[sa.Row]]:
    """(how many runs match, one page of them newest first)."""
    params = {"dataset": dataset, "kb": None if kb_id is None else str(kb_id), "answerer": answerer}
    total = conn.execute(sa.text("SELECT count(*) FROM answer_runs r JOIN retrieval_evaluation_datasets d "
                                 "ON d.id = r.dataset_id" + _RUN_FILTER), params).scalar_one()
    rows = conn.execute(sa.text(_RUN_SELECT + _RUN_FILTER + "ORDER BY r.created_at DESC, r.id LIMIT :limit "
                                "OFFSET :offset"), {**params, "limit": limit, "offset": offset}).all()
    return int(total), rows


def case_results(conn: sa.Connection, run_id, verdict: str | None) -> Sequence[sa.Row]:
    """``(case_id, result, record)`` of a run's cases in dataset order (``verdict``: only those)."""
    return conn.execute(sa.text(
        "SELECT case_id, result, record FROM answer_case_results WHERE run_id = CAST(:run AS uuid) "
        "AND (CAST(:verdict AS text) IS NULL OR verdict = :verdict) ORDER BY case_index"),
        {"run": str(run_id), "verdict": verdict}).all()


def cited_chunks(conn: sa.Connection, kb_id, ids: Sequence[str]) -> Sequence[sa.Row]:
    """``(id, content, searchable)`` of the chunks of knowledge base ``kb_id`` among ``ids``."""
    return [] if not ids else conn.execute(sa.text(_CITED_SQL), {"kb": str(kb_id), "ids": list(ids)}).all()


def prunable_runs(conn: sa.Connection, *, keep: int, days: float | None, dataset: str | None) -> Sequence[sa.Row]:
    """Answer runs beyond the ``keep`` newest of their dataset × KB × answerer and ``days`` old, oldest first."""
    return conn.execute(sa.text("""
WITH ranked AS (
    SELECT r.id, r.created_at, r.answerer, r.answerer_version, r.case_count, d.name AS dataset,
           kb.name AS knowledge_base,
           row_number() OVER (PARTITION BY d.name, r.knowledge_base_id, r.answerer
                              ORDER BY r.created_at DESC, r.id) AS place
    FROM answer_runs r
    JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
    JOIN knowledge_bases kb ON kb.id = r.knowledge_base_id
    WHERE (CAST(:dataset AS text) IS NULL OR d.name = :dataset)
)
SELECT id, created_at, answerer, answerer_version, case_count, dataset, knowledge_base,
       coalesce((SELECT sum(pg_column_size(cr.*)) FROM answer_case_results cr WHERE cr.run_id = ranked.id), 0)
       AS bytes
FROM ranked
WHERE place > greatest(:keep, 1)
  AND (CAST(:days AS float8) IS NULL OR created_at < now() - make_interval(secs => CAST(:days AS float8) * 86400))
ORDER BY created_at, id
"""), {"keep": keep, "days": days, "dataset": dataset}).all()


def delete_runs(conn: sa.Connection, run_ids: Sequence[str]) -> None:
    """Delete answer runs (their case rows cascade)."""
    conn.execute(sa.text("DELETE FROM answer_runs WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": list(run_ids)})
