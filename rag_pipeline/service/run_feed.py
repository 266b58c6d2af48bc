"""Evaluation runs made outside Dagster (CLI, service, API), in the order they finished: what the Dagster
``runs_outside_dagster`` sensor reports to the instance so the UI's partitions, plots and history include them."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from rag_pipeline.contracts.metrics import METRIC_NAMES
from rag_pipeline.evaluation.queries.run_history import finished_outside_dagster


@dataclass(frozen=True)
class FinishedRun:
    """One succeeded run made outside Dagster, with what its materialization shows."""

    run_id: str
    dataset: str
    dataset_version: str
    knowledge_base: str
    strategy_version: str
    params_hash: str
    case_count: int
    candidate_count: int
    finished_at: str
    averages: dict[str, float]
    knowledge_base_version: str | None = None

    @property
    def cursor(self) -> str:
        return f"{self.finished_at}|{self.run_id}"


def runs_outside_dagster(engine: sa.Engine, after: str | None = None, limit: int = 100) -> list[FinishedRun]:
    """Succeeded runs without a Dagster run id that finished after the cursor ``after`` (``finished_at|run_id``
    of the last one seen; None: from the beginning), oldest first, at most ``limit``."""
    after_at, _, after_id = (after or "").partition("|")
    with engine.connect() as conn:
        rows = finished_outside_dagster(conn, after_at or "-infinity", after_id, limit)
    return [FinishedRun(r["run_id"], r["dataset"], r["content_hash"], r["knowledge_base"], r["strategy_version"],
                        r["params_hash"], r["case_count"], r["candidate_count"], r["finished_at"].isoformat(),
                        {m: float(r[m]) for m in METRIC_NAMES if r[m] is not None}, r["knowledge_base_version"])
            for r in rows]
