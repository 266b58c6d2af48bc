"""Evaluation runs made outside Dagster (CLI, service, API), in the order they finished: what the Dagster
``runs_outside_dagster`` sensor reports to the instance so the UI's partitions, plots and history include them."""

from __future__ import annotations

import sqlalchemy as sa

from rag_pipeline.contracts.metrics import METRIC_NAMES
from rag_pipeline.contracts.runs import FinishedRun
from rag_pipeline.evaluation.runs.queries import finished_outside_dagster

FIELDS = ("run_id", "dataset", "knowledge_base", "strategy_version", "params_hash", "case_count", "candidate_count",
          "knowledge_base_version")


def runs_outside_dagster(engine: sa.Engine, after: str | None = None, limit: int = 100) -> list[FinishedRun]:
    """Succeeded runs without a Dagster run that finished after cursor ``after`` (``finished_at|run_id``)."""
    after_at, _, after_id = (after or "").partition("|")
    with engine.connect() as conn:
        rows = finished_outside_dagster(conn, after_at or "-infinity", after_id, limit)
    return [FinishedRun(**{k: r[k] for k in FIELDS}, dataset_version=r["content_hash"],
                        finished_at=r["finished_at"].isoformat(),
                        averages={m: float(r[m]) for m in METRIC_NAMES if r[m] is not None}) for r in rows]
