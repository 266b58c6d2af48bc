"""``running`` evaluation runs whose process is gone end ``failed``, with the reason, at the next check.

A run's process can end without recording its outcome: ``kill -9``, the OOM killer, or a failure while the
database was down (it could not write why). Two checks find such runs, each with the reason it can give:

- a run launched through Dagster whose Dagster run has ended (failed, cancelled, or succeeded without the
  evaluation recording it) gets "its Dagster run ... failed: <Dagster's error>";
- a run whose process on this host is gone (its pid and start time, :mod:`rag_pipeline.evaluation.runs.owner`)
  gets "its process (pid N on HOST) ended without recording the outcome ...".

A ``queued`` row (HTTP API, console) names the process that queued it and submits its Dagster run in the
background; :func:`end_unsubmitted_runs` fails one whose process is gone (``kill -9`` right after the 202) before
its Dagster run was created, with that reason, so it never waits for a run that will not come. The daemon's
``unsubmitted_evaluations`` sensor and the server's reconcile loop check it.

A run owned by another host, outside Dagster, is left to its heartbeat (``abandoned`` after
``RAG_RUN_STALE_SECONDS``). The server checks every few seconds (its reconcile loop), an evaluation checks before
it starts and ``runs`` before it lists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import sqlalchemy as sa

from rag_pipeline.evaluation.runs import lifecycle as run_records

EndedDagsterRuns = Callable[[Sequence[str]], Mapping[str, str]]
"""Given Dagster run ids, those that have ended, each with what happened ("failed: <error>", "was cancelled")."""


ExistingDagsterRuns = Callable[[Sequence[str]], set[str]]
"""Given Dagster run ids, those that exist in the Dagster instance (in whatever status)."""


def end_unsubmitted_runs(engine: sa.Engine, dagster_exists: ExistingDagsterRuns) -> int:
    """Mark failed every ``queued`` run whose process that queued it (on this host) is gone and whose Dagster run
    does not exist (``dagster_exists``): it was never submitted, nothing will start it; returns how many."""
    orphans = run_records.orphaned_queued_runs(engine)
    if not orphans:
        return 0
    exists = dagster_exists(sorted({row.dagster_run_id for row, _ in orphans if row.dagster_run_id}))
    ended = 0
    for row, owner in orphans:
        if row.dagster_run_id in exists:
            continue  # submitted: the daemon starts it (or the launcher's reconcile reports how its run ended)
        ended += run_records.fail_queued_run(
            engine, row.id, f"the process that queued it ({owner}) ended before it submitted Dagster run "
                            f"{row.dagster_run_id} (the server was killed or stopped); nothing was evaluated: "
                            "evaluate again")
    return ended


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
