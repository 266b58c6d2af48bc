"""Statements of run retention: which runs may go, removing them, and the runs a stored comparison refers to
(``retrieval_comparison_runs``)."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from rag_pipeline.evaluation.queries.runs import EFFECTIVE_STATUS


def prunable_runs(conn: sa.Connection, *, keep: int, days: float | None, dataset: str | None,
                  stale: int) -> Sequence[sa.Row]:
    """Runs beyond the ``keep`` newest of their dataset × knowledge base × strategy, neither current nor in
    progress nor queued (started ``days`` ago or earlier; ``dataset``: of that name), oldest first, with
    ``compared`` (a stored comparison refers to it) and ``bytes`` (its partition's and case results' size)."""
    return conn.execute(sa.text(f"""
WITH ranked AS (
    SELECT r.id, r.is_current, r.started_at, r.strategy_version, r.candidate_count, d.name AS dataset,
           kb.name AS knowledge_base, {EFFECTIVE_STATUS} AS status,
           row_number() OVER (PARTITION BY d.name, r.knowledge_base_id, r.strategy_version
                              ORDER BY r.started_at DESC, r.id) AS place,
           EXISTS (SELECT 1 FROM retrieval_comparison_runs c WHERE c.evaluation_run_id = r.id) AS compared
    FROM retrieval_evaluation_runs r
    JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
    JOIN knowledge_bases kb ON kb.id = r.knowledge_base_id
    WHERE (CAST(:dataset AS text) IS NULL OR d.name = :dataset)
)
SELECT id, is_current, started_at, strategy_version, candidate_count, dataset, knowledge_base, status, compared,
       coalesce(pg_total_relation_size(to_regclass(quote_ident(rag_candidate_partition_name(id)))), 0)
       + coalesce((SELECT sum(pg_column_size(cr.*)) FROM retrieval_evaluation_case_results cr
                   WHERE cr.evaluation_run_id = ranked.id), 0) AS bytes
FROM ranked
WHERE place > :keep AND NOT is_current AND status NOT IN ('running', 'queued')
  AND (CAST(:days AS float8) IS NULL OR started_at < now() - make_interval(secs => CAST(:days AS float8) * 86400))
ORDER BY started_at, id
"""), {"keep": keep, "days": days, "dataset": dataset, "stale": stale}).all()


def set_lock_timeout(conn: sa.Connection, seconds: int) -> None:
    """Wait at most ``seconds`` for a lock, until the transaction ends."""
    conn.execute(sa.text("SELECT set_config('lock_timeout', :t, true)"), {"t": f"{int(seconds)}s"})


def delete_runs(conn: sa.Connection, run_ids: list[str]) -> None:
    """Delete the runs that are not current (the trigger drops each run's partition; case results and comparison
    records cascade)."""
    conn.execute(sa.text("DELETE FROM retrieval_evaluation_runs WHERE id = ANY(CAST(:ids AS uuid[])) "
                         "AND NOT is_current"), {"ids": run_ids})


def replace_comparison_runs(conn: sa.Connection, comparison: str, run_ids: Sequence[str]) -> None:
    """Make ``run_ids`` (those that exist) the runs comparison ``comparison`` refers to."""
    conn.execute(sa.text("DELETE FROM retrieval_comparison_runs WHERE comparison = :c"), {"c": comparison})
    conn.execute(sa.text(
        "INSERT INTO retrieval_comparison_runs (comparison, evaluation_run_id) "
        "SELECT :c, r.id FROM retrieval_evaluation_runs r WHERE r.id = ANY(CAST(:ids AS uuid[])) "
        "ON CONFLICT DO NOTHING"), {"c": comparison, "ids": [str(i) for i in run_ids]})
