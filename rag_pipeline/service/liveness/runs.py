"""``running`` evaluation runs whose process is gone end ``failed``, with the reason, at the next check.

A run's process can end without recording its outcome: ``kill -9``, the OOM killer, or a failure while the
database was down (it could not write why). Two checks find such runs, each with the reason it can give:

- a run launched through Dagster whose Dagster run has ended (failed, cancelled, or succeeded without the
  evaluation recording it) gets "its Dagster run ... failed: <Dagster's error>";
- a run whose process on this host is gone (its pid and start time, :mod:`rag_pipeline.evaluation.run_owner`)
  gets "its process (pid N on HOST) ended without recording the outcome ...".

A run owned by another host, outside Dagster, is left to its heartbeat (``abandoned`` after
``RAG_RUN_STALE_SECONDS``). The server checks every few seconds (its reconcile loop), an evaluation checks before
it starts and ``runs`` before it lists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import sqlalchemy as sa

from rag_pipeline.evaluation import run_records

EndedDagsterRuns = Callable[[Sequence[str]], Mapping[str, str]]
"""Given Dagster run ids, those that have ended, each with what happened ("failed: <error>", "was cancelled")."""


def end_gone_runs(engine: sa.Engine, dagster_ended: EndedDagsterRuns | None = None) -> int:
    """Mark failed every ``running`` run whose Dagster run has ended (``dagster_ended``, when a Dagster instance
    is at hand) or whose process on this host is gone; returns how many."""
    rows = run_records.running_runs(engine)
    ended = 0
    if dagster_ended is not None:
        by_dagster: dict[str, list] = {}  # one Dagster run can carry several runs (evaluate_strategies)
        for row in rows:
            if row.dagster_run_id:
                by_dagster.setdefault(row.dagster_run_id, []).append(row)
        finished = dict(dagster_ended(list(by_dagster))) if by_dagster else {}
        for dagster_run_id, what in finished.items():
            for row in by_dagster[dagster_run_id]:
                ended += run_records.fail_running(engine, row.id, f"its Dagster run {dagster_run_id} {what}")
        rows = [r for r in rows if r.dagster_run_id not in finished]
    return ended + run_records.sweep_gone(engine, rows)
