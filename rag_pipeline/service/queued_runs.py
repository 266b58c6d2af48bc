"""Queued evaluations: the run rows the HTTP API creates before it hands the work to Dagster.

:func:`queue_evaluations` validates everything a run would refuse (knowledge base, dataset version, strategies
and their applicability, the label check of docs/design.md §8, parameter conflicts) and then inserts one ``queued`` run
per strategy in one transaction, each with the id of the Dagster run that will carry it out (one Dagster run for
all of them: ``evaluate_strategies``, a step per strategy), so nothing is queued when anything is wrong. The
Dagster step that picks a run up moves it to ``running`` (``evaluate_stored(queued_run_id=...)``); a retry of that
step carries out the row :func:`resume_queued_run` gives it (a new row when the failed attempt had started its own).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence

import sqlalchemy as sa

from rag_pipeline.contracts.runs import QueuedEvaluation, QueuedRun, WaitingRun
from rag_pipeline.evaluation.datasets.resolve import DatasetNotFoundError, resolve_dataset
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.retrieval.strategies import get_strategy, load_registry
from rag_pipeline.retrieval.strategy_store import register_strategy
from rag_pipeline.service.applicability import choose_strategies
from rag_pipeline.service.evaluations import check_labels_first, label_headline
from rag_pipeline.storage.ids import as_uuid

RETRY_WAIT_S = 60.0
"""How long a retried step waits for the database to answer again before it fails (and Dagster's policy decides)."""
STRATEGY_STEP = "evaluate_strategy"  # the op of ``evaluate_strategies`` that evaluates one strategy


def strategy_step(version: str) -> str:
    """The mapping key of a strategy's step in ``evaluate_strategies`` (Dagster allows letters, digits, ``_``)."""
    return re.sub(r"\W", "_", version)


def strategy_step_key(version: str) -> str:
    """The Dagster step key of strategy ``version``'s step in ``evaluate_strategies`` (its failure reason)."""
    return f"{STRATEGY_STEP}[{strategy_step(version)}]"


def queue_evaluations(engine: sa.Engine, knowledge_base: str, dataset_id: str,
                      strategy_versions: Sequence[str] | None = None, *, strict: bool = False,
                      one_dagster_run: bool = True) -> QueuedEvaluation:
    """Queue one run per strategy of a stored dataset version on a knowledge base (name or id); default
    strategies: every one the knowledge base can run. The runs share one Dagster run id (``one_dagster_run``;
    else one each). Raises the service's user errors, nothing written."""
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
    versions = choose_strategies(engine, kb, strategy_versions)
    if as_uuid(dataset_id) is None:
        raise DatasetNotFoundError(f"no stored dataset version {dataset_id}")
    ref = resolve_dataset(engine, dataset_id, knowledge_base=kb, source="stored")
    dataset = ref.dataset
    warning = label_headline(check_labels_first(engine, ref, strict=strict))
    registry = load_registry()
    queued, shared_id = [], str(uuid.uuid4())
    with engine.begin() as conn:
        for version in versions:
            strategy = get_strategy(version, registry)
            params_hash = register_strategy(conn, strategy)
            key = f"{dataset.name}|{version}"
            dagster_run_id = shared_id if one_dagster_run else str(uuid.uuid4())
            run_id = run_records.create_run(conn, dataset_id=dataset_id, knowledge_base_id=kb.id, strategy=strategy,
                                     params_hash=params_hash, partition_key=key, dagster_run_id=dagster_run_id,
                                     queued=True)
            queued.append(QueuedRun(run_id=str(run_id), strategy_version=version, dataset=dataset.name,
                                    dataset_id=str(dataset_id), partition_key=key, dagster_run_id=dagster_run_id))
    return QueuedEvaluation(runs=queued, label_warning=warning)


def fail_queued(engine: sa.Engine, run_id: str, error: str) -> None:
    """Mark a queued run failed (its submission to Dagster failed, or Dagster dropped it before it started)."""
    run_records.mark_failed(engine, run_id, error)


def queued_runs(engine: sa.Engine, limit: int = 500) -> list[WaitingRun]:
    """The runs still ``queued``, oldest first."""
    with engine.connect() as conn:
        rows = run_records.list_runs(conn, status="queued", limit=limit)
    return [WaitingRun(run_id=str(r.id), dagster_run_id=r.dagster_run_id, queued_at=r.queued_at,
                       strategy_version=r.strategy_version) for r in rows][::-1]


def resume_queued_run(engine: sa.Engine, run_id: str, *, dagster_run_id: str, attempt_error: str | None = None,
                      on_wait: Callable[[BaseException], None] | None = None) -> run_records.Attempt:
    """For a retry of the Dagster step carrying out the queued run ``run_id``: wait up to :data:`RETRY_WAIT_S`
    for the database to answer (``on_wait(error)`` once when it does not at first), then the row this attempt
    evaluates (:func:`rag_pipeline.evaluation.runs.lifecycle.resume_queued_run`; ``attempt_error``: the failed
    attempt's error, recorded in its row when it was left ``running``)."""
    run_records.wait_until_reachable(engine, RETRY_WAIT_S, on_wait)
    return run_records.resume_queued_run(engine, run_id, dagster_run_id=dagster_run_id, attempt_error=attempt_error)


def end_unrecorded_attempts(engine: sa.Engine, *, dagster_run_id: str, partition_key: str,
                            attempt_error: str | None = None,
                            on_wait: Callable[[BaseException], None] | None = None) -> list:
    """For a retry of a Dagster step that creates its own run row (no queued row): wait up to
    :data:`RETRY_WAIT_S` for the database, then end ``failed``, with why, the rows of that partition the failed
    attempt left ``running`` (:func:`rag_pipeline.evaluation.runs.lifecycle.end_unrecorded_attempts`); their ids."""
    run_records.wait_until_reachable(engine, RETRY_WAIT_S, on_wait)
    return run_records.end_unrecorded_attempts(engine, dagster_run_id=dagster_run_id, partition_key=partition_key,
                                               attempt_error=attempt_error)
