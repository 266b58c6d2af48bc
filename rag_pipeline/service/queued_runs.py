"""Queued evaluations (docs/http-api.md, "Evaluations are asynchronous"): run rows the HTTP API and the console create,
that Dagster's ``queued_evaluations`` sensor turns into one ``evaluate_strategies`` run each click (one per strategy
on Celery workers)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Mapping, Sequence

import sqlalchemy as sa

from rag_pipeline.contracts.runs import QueuedEvaluation, QueuedRun, QueueInfo
from rag_pipeline.evaluation.datasets.resolve import DatasetNotFoundError, resolve_dataset
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.evaluation.runs import queries as run_queries
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.retrieval.strategies import get_strategy, load_registry
from rag_pipeline.retrieval.strategy_store import register_strategy
from rag_pipeline.service.applicability import choose_strategies
from rag_pipeline.service.evaluations import check_labels_first, label_headline
from rag_pipeline.settings import get_settings
from rag_pipeline.storage.ids import as_uuid
from rag_pipeline.storage.urls import mask_secrets

RETRY_WAIT_S = 60.0
"""How long a retried step waits for the database to answer again before it fails (and Dagster's policy decides)."""
SENSOR = "queued_evaluations"  # its ticks are recorded as "<SENSOR>:<queue>"
STALE_TICK_S = 60.0
"""A last tick of :data:`SENSOR` older than this: no daemon picks queued runs up (it ticks every few seconds)."""
NO_DAEMON_FIX = ("start `make dev` (the Dagster UI and its daemon) or `rag-pipeline serve --with-daemon`, on the "
                 "same DAGSTER_HOME and database")


def queue_evaluations(engine: sa.Engine, knowledge_base: str, dataset_id: str,
                      strategy_versions: Sequence[str] | None = None, *, strict: bool = False,
                      one_dagster_run: bool = True) -> QueuedEvaluation:
    """Queue a run per strategy of a stored dataset version under one queue id; nothing written on any error."""
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
            run_queries.set_queue(conn, run_id, get_settings().evaluation_queue)
            queued.append(QueuedRun(run_id=str(run_id), strategy_version=version, dataset=dataset.name,
                                    dataset_id=str(dataset_id), partition_key=key, dagster_run_id=dagster_run_id))
    return QueuedEvaluation(runs=queued, label_warning=warning)


def queued_runs(engine: sa.Engine, limit: int = 500) -> list[QueuedRun]:
    """The runs still ``queued`` in this process's queue (``RAG_EVALUATION_QUEUE``), oldest first."""
    with engine.connect() as conn:
        rows = run_queries.queued_rows(conn, get_settings().evaluation_queue, limit)
    return [QueuedRun(run_id=str(r.id), strategy_version=r.strategy_version, dataset=r.dataset,
                      dataset_id=str(r.dataset_id), partition_key=r.partition_key or "",
                      dagster_run_id=r.dagster_run_id or "") for r in rows]


def claim(engine: sa.Engine, queue_id: str, dagster_run_id: str, run_ids: Sequence[str] | None = None) -> int:
    """The queued rows of ``queue_id`` (only ``run_ids`` of them, when given) are carried out by Dagster run
    ``dagster_run_id``; how many."""
    with engine.begin() as conn:
        return run_queries.claim_queued(conn, queue_id, dagster_run_id, None if run_ids is None else list(run_ids))


def record_tick(engine: sa.Engine) -> None:
    """:data:`SENSOR` ticked now."""
    with engine.begin() as conn:
        run_queries.record_tick(conn, f"{SENSOR}:{get_settings().evaluation_queue}")


def queue_status(engine: Callable[[], sa.Engine], daemon: subprocess.Popen | None = None) -> QueueInfo:
    """Does a Dagster daemon pick queued runs up: has :data:`SENSOR` ticked in the last :data:`STALE_TICK_S`
    seconds? ``daemon``: the one ``serve --with-daemon`` started (its exit is reported at once). Never raises."""
    if daemon is not None and daemon.poll() is not None:
        return QueueInfo(daemon_running=False, message=f"the daemon this server started (pid {daemon.pid}) exited "
                         f"with code {daemon.returncode}: queued evaluation runs wait — {NO_DAEMON_FIX}")
    try:
        with engine().connect() as conn:
            age = run_queries.tick_age(conn, f"{SENSOR}:{get_settings().evaluation_queue}")
    except Exception as exc:  # noqa: BLE001 - the database went away: say so, never fail the caller
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return QueueInfo(daemon_running=False, message=f"the run queue cannot be read ({mask_secrets(first)}): "
                         "check the database (`rag-pipeline db status`)")
    if age is not None and age < STALE_TICK_S:
        return QueueInfo(daemon_running=True)
    seen = "none has ever picked up queued runs" if age is None else f"none has picked up queued runs for {age:.0f} s"
    return QueueInfo(daemon_running=False, message=f"no Dagster daemon is running ({seen}): queued evaluation runs "
                     f"wait until one starts — {NO_DAEMON_FIX}")


def end_gone_runs(engine: sa.Engine, dagster_ended: Callable[[Sequence[str]], Mapping[str, str]] | None = None) -> int:
    """Mark failed every ``running`` run whose Dagster run ended or whose heartbeat fell silent; how many."""
    with engine.connect() as conn:
        rows = run_queries.running_runs(conn)
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


def wait_for_database(engine: sa.Engine, on_wait: Callable[[BaseException], None] | None = None) -> None:
    """For a retried step: wait up to :data:`RETRY_WAIT_S` for the database to answer."""
    run_records.wait_until_reachable(engine, RETRY_WAIT_S, on_wait)


def resume_queued_run(engine: sa.Engine, run_id: str, *, dagster_run_id: str, attempt_error: str | None = None,
                      on_wait: Callable[[BaseException], None] | None = None) -> run_records.Attempt:
    """For a retried step: wait up to :data:`RETRY_WAIT_S` for the database, then the row it evaluates."""
    run_records.wait_until_reachable(engine, RETRY_WAIT_S, on_wait)
    return run_records.resume_queued_run(engine, run_id, dagster_run_id=dagster_run_id, attempt_error=attempt_error)


def end_unrecorded_attempts(engine: sa.Engine, *, dagster_run_id: str, partition_key: str,
                            attempt_error: str | None = None,
                            on_wait: Callable[[BaseException], None] | None = None) -> list:
    """For a retried step: wait for the database, then end ``failed`` the rows the last attempt left running."""
    run_records.wait_until_reachable(engine, RETRY_WAIT_S, on_wait)
    return run_records.end_unrecorded_attempts(engine, dagster_run_id=dagster_run_id, partition_key=partition_key,
                                               attempt_error=attempt_error)
