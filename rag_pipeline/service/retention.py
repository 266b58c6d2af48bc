"""Retention: remove old evaluation and answer runs so the database stays bounded (``rag-pipeline runs prune``, the
job ``prune_evaluation_runs``; what is kept: docs/evaluating.md, "Retention", docs/design.md §12.6)."""

from __future__ import annotations

import sqlalchemy as sa

from rag_pipeline.answers.runs import queries as answer_queries
from rag_pipeline.contracts.answers import PrunedAnswerRun
from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.contracts.runs import PrunedRun, PruneResult
from rag_pipeline.evaluation.runs import queries
from rag_pipeline.evaluation.runs.lifecycle import stale_after_seconds

LOCK_TIMEOUT_S = 10


class RetentionError(BadInputError, ValueError):
    """Bad retention arguments, or the candidate table is busy; the message says what to do."""


def prune_runs(engine: sa.Engine, *, keep_last: int, older_than_days: float | None = None,
               dataset: str | None = None, dry_run: bool = False, include_compared: bool = False) -> PruneResult:
    """Remove old runs (see the module doc); returns what was (or, with ``dry_run``, would be) removed."""
    if keep_last < 0:
        raise RetentionError(f"--keep-last must be 0 or more, got {keep_last}")
    if older_than_days is not None and not older_than_days >= 0:
        raise RetentionError(f"--older-than must be 0 or more days, got {older_than_days}")
    result = PruneResult(dry_run=dry_run)
    with engine.begin() as conn:
        rows = queries.prunable_runs(conn, keep=keep_last, days=older_than_days, dataset=dataset,
                                     stale=stale_after_seconds())
        for r in rows:
            if r.compared and not include_compared:
                result.kept_for_comparison += 1
                continue
            result.runs.append(PrunedRun(run_id=str(r.id), dataset=r.dataset, knowledge_base=r.knowledge_base,
                                         strategy_version=r.strategy_version, status=r.status,
                                         started_at=r.started_at, candidate_rows=int(r.candidate_count or 0),
                                         bytes=int(r.bytes)))
        result.answer_runs = [
            PrunedAnswerRun(run_id=str(r.id), dataset=r.dataset, knowledge_base=r.knowledge_base,
                            answerer=r.answerer, answerer_version=r.answerer_version,
                            created_at=r.created_at.isoformat(), cases=int(r.case_count), bytes=int(r.bytes))
            for r in answer_queries.prunable_runs(conn, keep=keep_last, days=older_than_days, dataset=dataset)]
        if dry_run:
            return result
        answer_queries.delete_runs(conn, [r.run_id for r in result.answer_runs])
        if not result.runs:
            return result
        queries.set_lock_timeout(conn, LOCK_TIMEOUT_S)
        try:
            queries.delete_runs(conn, [r.run_id for r in result.runs])
        except sa.exc.OperationalError as exc:
            if getattr(getattr(exc, "orig", None), "sqlstate", None) != "55P03":  # lock_not_available
                raise
            raise RetentionError(
                f"an evaluation run is being written (its candidates hold the table for {LOCK_TIMEOUT_S} s and "
                "more); nothing was removed — prune again when it has finished") from None
    return result
