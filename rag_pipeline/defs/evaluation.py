"""Asset group ``retrieval_evaluation``: dataset → candidates → case metrics → run summary, per dataset × strategy;
the three run assets are one step (one transaction), retried on transient database errors only."""

import contextlib
import time
from collections.abc import Sequence
from pathlib import Path

import dagster as dg
import sqlalchemy as sa

from rag_pipeline.contracts.dataset import StoredDataset
from rag_pipeline.contracts.errors import USER_ERRORS, RagError
from rag_pipeline.contracts.metrics import HEADLINE_METRICS
from rag_pipeline.defs import evaluation_metadata as md
from rag_pipeline.defs.instance import POOL
from rag_pipeline.defs.lineage import DATASET_KB, observe_dataset
from rag_pipeline.defs.partitions import evaluation_partitions, split_key, the_dataset_of_the_partition
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.defs.workers.identity import WORKER_TAG, worker_name
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.service import datasets, evaluations, queued_runs
from rag_pipeline.settings import datasets_dir
from rag_pipeline.storage.engine import TRANSIENT_ERRORS
from rag_pipeline.storage.urls import mask_secrets

GROUP = "retrieval_evaluation"
RETRY_POLICY = dg.RetryPolicy(max_retries=2, delay=5, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)


@contextlib.contextmanager
def fail_fast_unless_transient():
    """Re-raise transient database errors (retried); anything else is a ``Failure`` not retried."""
    try:
        yield
    except TRANSIENT_ERRORS:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure becomes one dg.Failure with the masked message
        text = mask_secrets(str(exc))
        user = isinstance(exc, (*USER_ERRORS, LookupError))
        message = text if user else f"{type(exc).__name__}: {text}"
        metadata = {"error": dg.MetadataValue.md("```\n" + message + "\n```")}
        # no cause chain when it would carry an unmasked secret (Dagster stores the chain in the event log)
        cause = None if user or text != str(exc) else exc
        raise dg.Failure(description=message, metadata=metadata, allow_retries=False) from cause


def raise_failures(failed: dict[str, BaseException]) -> None:
    """Nothing when no strategy failed; a transient database error of one (the step is retried: the strategies
    stored already are not evaluated again); else one error naming each failed strategy and why (the messages
    are masked by ``fail_fast_unless_transient``)."""
    if not failed:
        return
    for exc in failed.values():
        if isinstance(exc, TRANSIENT_ERRORS):
            raise exc
    raise ClickFailed("; ".join(
        f"{version}: {exc if isinstance(exc, USER_ERRORS) else f'{type(exc).__name__}: {exc}'}"
        for version, exc in failed.items()))


class ClickFailed(RagError):  # noqa: N818 - reads as the event it reports
    """Several strategies of one click failed (each one's reason in the message)."""


class EvaluationDatasetConfig(dg.Config):
    knowledge_base: str = ""
    """Knowledge base for a bare-array dataset file (object-form files name their own)."""
    dataset_id: str = ""
    """A stored dataset version to evaluate instead of the file (set by the HTTP API for an uploaded dataset)."""


class EvaluationRunConfig(dg.Config):
    batch_size: int = 64
    """Cases per retrieval batch (one embedding call and one SQL statement per leg per batch)."""
    readers: int = 0
    """Read connections searching batches in parallel; 0 = ``RAG_EVAL_READERS`` or 2."""
    strict: bool = False
    """Refuse to run when any label is not a searchable chunk (a dataset with no valid label never runs)."""
    evaluation_run_id: str = ""
    """The ``queued`` evaluation run this Dagster run carries out (set by the HTTP API, which created the row);
    empty: a new run row."""


@dg.asset(group_name=GROUP, partitions_def=evaluation_partitions, kinds={"json", "postgres"},
          retry_policy=RETRY_POLICY, pool=POOL)
def evaluation_dataset(context: dg.AssetExecutionContext, config: EvaluationDatasetConfig,
                       rag_db: RagDatabase) -> dg.MaterializeResult:
    """The labelled dataset ``datasets/<dataset>.json`` (docs/design.md §2), validated and stored as a version.

    Every problem of the file is reported at once (file, case index and case_id, field) and nothing is
    written. A valid file becomes a row of ``retrieval_evaluation_datasets`` keyed by the SHA-256 of its
    canonical cases: the same content twice is one dataset version."""
    dataset_key, _ = split_key(context)
    path: Path | str | None = datasets_dir() / f"{dataset_key}.json"
    with fail_fast_unless_transient():
        if config.dataset_id:  # a version stored by the HTTP API (an upload): no file to read
            stored = datasets.describe_stored_dataset(rag_db.engine(), config.dataset_id, dataset_key)
            path = stored.path
        else:
            stored = datasets.register_dataset(rag_db.engine(), str(path), config.knowledge_base or None)
    with fail_fast_unless_transient():  # recorded now, before the evaluation step reads it (its provenance)
        kb_version = observe_dataset(context.instance, rag_db.engine(), dataset_key, stored.knowledge_base)
    if stored.relevant_ids_not_in_kb:
        context.log.warning(f"{stored.relevant_ids_not_in_kb} relevant chunk id(s) are not chunks of knowledge "
                            f"base {stored.knowledge_base!r}")
    return dg.MaterializeResult(metadata=dataset_metadata(stored, path, kb_version))


def dataset_metadata(stored: StoredDataset, path, kb_version: str) -> dict:
    """The metadata of an ``evaluation_dataset`` materialisation of the stored dataset version ``stored``."""
    return {
        "dataset_id": stored.dataset_id,
        "dataset_name": stored.name,
        "dataset_version": stored.version,
        "knowledge_base": stored.knowledge_base,
        "knowledge_base_version": kb_version,
        "source_path": dg.MetadataValue.path(str(path)) if path else "(uploaded through the HTTP API)",
        "dagster/row_count": stored.cases,
        "relevant_chunk_ids": stored.relevant_ids,
        "relevant_ids_not_in_kb": stored.relevant_ids_not_in_kb,
        "k_min": stored.k_min,
        "k_max": stored.k_max,
    }


# Each evaluation partition depends on the knowledge-base version its dataset names (defs.lineage): a direct
# dependency of every run asset, since Dagster marks out of date only the direct children of a changed version.
KB_OF_THE_DATASET = dg.AssetDep(DATASET_KB, partition_mapping=the_dataset_of_the_partition)


def stored_dataset_id(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext) -> str:
    """The dataset version the upstream ``evaluation_dataset`` materialisation of this partition stored."""
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=evaluation_dataset.key, asset_partitions=[str(context.partition_key)]),
        limit=1,
    ).records
    entry = records[0].asset_materialization.metadata.get("dataset_id") if records else None
    if entry is None:
        raise LookupError(f"evaluation_dataset has not been materialised for partition {context.partition_key}; "
                          "materialise the whole retrieval_evaluation group (job evaluate_retrieval)")
    return entry.value


@dg.multi_asset(
    name="evaluation_run",
    specs=[
        dg.AssetSpec("retrieval_candidates", deps=[evaluation_dataset, KB_OF_THE_DATASET], group_name=GROUP,
                     kinds={"postgres", "python"}, description=md.CANDIDATES_DOC),
        dg.AssetSpec("case_metrics", deps=["retrieval_candidates", KB_OF_THE_DATASET], group_name=GROUP,
                     kinds={"postgres", "python"}, description=md.CASE_METRICS_DOC),
        dg.AssetSpec("evaluation_run_summary", deps=["case_metrics", KB_OF_THE_DATASET], group_name=GROUP,
                     kinds={"postgres"}, description=md.SUMMARY_DOC),
    ],
    partitions_def=evaluation_partitions,
    retry_policy=RETRY_POLICY,
    pool=POOL,
)
def evaluation_run(context: dg.AssetExecutionContext, config: EvaluationRunConfig, rag_db: RagDatabase):
    """One evaluation run of the partition's strategy over the partition's dataset, stored atomically."""
    _, version = split_key(context)
    queued_run_id, stored = this_attempts_run(context, rag_db, config.evaluation_run_id or None,
                                              str(context.partition_key))
    worker = name_the_worker(context, rag_db, [queued_run_id] if queued_run_id else [])
    with fail_fast_unless_transient():
        dataset_id = stored_dataset_id(context)
    metadata = evaluate_partition(context, rag_db, dataset_id, version, str(context.partition_key),
                                  batch_size=config.batch_size, readers=config.readers, strict=config.strict,
                                  queued_run_id=queued_run_id, worker=worker, stored=stored)
    for key, values in metadata.items():
        yield dg.MaterializeResult(asset_key=key, metadata=values)


def this_attempts_run(context: dg.AssetExecutionContext | dg.OpExecutionContext, rag_db: RagDatabase,
                      queued_run_id: str | None, partition: str) -> tuple[str | None, bool]:
    """The queued run row this attempt carries out, and whether an earlier attempt already stored it."""
    if context.retry_number == 0:
        return queued_run_id, False
    waiting = _waiting(context)
    if not queued_run_id:
        with fail_fast_unless_transient():
            ended = queued_runs.end_unrecorded_attempts(rag_db.engine(), dagster_run_id=context.run_id,
                                                        partition_key=partition,
                                                        attempt_error=previous_attempt_error(context),
                                                        on_wait=waiting)
        if ended:
            context.log.info(f"retry {context.retry_number}: evaluation run(s) {', '.join(map(str, ended))} of the "
                             "failed attempt ended failed; this attempt evaluates as a new run")
        return None, False
    with fail_fast_unless_transient():
        attempt = queued_runs.resume_queued_run(rag_db.engine(), queued_run_id, dagster_run_id=context.run_id,
                                                attempt_error=previous_attempt_error(context), on_wait=waiting)
    if attempt.ended is not None:
        context.log.info(f"retry {context.retry_number}: evaluation run {attempt.ended} of the failed attempt is "
                         f"failed; this attempt evaluates it again as run {attempt.run_id}")
    return str(attempt.run_id), attempt.stored


def _waiting(context: dg.AssetExecutionContext | dg.OpExecutionContext):
    """What a retried step logs while it waits for the database to answer again."""
    def waiting(exc: BaseException) -> None:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        context.log.warning(f"retry {context.retry_number}: waiting up to {queued_runs.RETRY_WAIT_S:.0f} s for the "
                            f"database to answer: {mask_secrets(first)}")

    return waiting


def wait_for_the_database(context: dg.AssetExecutionContext | dg.OpExecutionContext, rag_db: RagDatabase) -> None:
    """A retried step (after a database outage, say) first waits up to ``RETRY_WAIT_S`` for the database."""
    if context.retry_number > 0:
        with fail_fast_unless_transient():
            queued_runs.wait_for_database(rag_db.engine(), _waiting(context))


def previous_attempt_error(context: dg.AssetExecutionContext | dg.OpExecutionContext) -> str | None:
    """The innermost error the previous attempt of this step failed with (``Type: message``), or None."""
    step_key = context.get_step_execution_context().step.key
    try:
        entries = context.instance.all_logs(context.run_id, of_type=dg.DagsterEventType.STEP_UP_FOR_RETRY)
    except Exception:  # noqa: BLE001 - the reason is best effort: the row then says where to look
        return None
    errors = [getattr(getattr(e.dagster_event, "event_specific_data", None), "error", None) for e in entries
              if e.step_key == step_key]
    error = errors[-1] if errors else None
    while error is not None and getattr(error, "cause", None) is not None:
        error = error.cause  # Dagster wraps the op's exception (RetryRequestedFromPolicy): the cause is ours
    message = (getattr(error, "message", "") or "").strip()
    return mask_secrets(message) if message else None


def name_the_worker(context: dg.AssetExecutionContext | dg.OpExecutionContext, rag_db: RagDatabase,
                    queued_run_ids: Sequence[str]) -> str:
    """This process's worker name, as the run's tag and in the queued rows before the evaluation starts."""
    worker = worker_name()
    context.instance.add_run_tags(context.run_id, {WORKER_TAG: worker})
    context.log.info(f"executed by {worker}")
    with fail_fast_unless_transient():
        for run_id in queued_run_ids:
            run_records.set_worker(rag_db.engine(), run_id, worker)
    return worker


def evaluate_partition(context: dg.AssetExecutionContext | dg.OpExecutionContext, rag_db: RagDatabase,
                       dataset_id: str, version: str, partition: str, *, batch_size: int, readers: int,
                       strict: bool, queued_run_id: str | None, worker: str,
                       stored: bool = False) -> dict[str, dict]:
    """Evaluate strategy ``version`` as partition ``partition``; the metadata of each of :data:`md.RUN_ASSETS`."""
    engine = rag_db.engine(readers or None)
    if stored:
        context.log.info(f"{version}: evaluation run {queued_run_id} was stored by an earlier attempt of this step; "
                         "not evaluated again")
        with fail_fast_unless_transient():
            return stored_metadata(engine, str(queued_run_id), worker)
    with fail_fast_unless_transient():
        outcome = evaluations.evaluate_stored(
            engine, dataset_id, version, batch_size=batch_size, readers=rag_db.reader_count(readers),
            strict=strict, partition_key=partition, dagster_run_id=context.run_id,
            progress=case_progress(context, version), logger=context.log, queued_run_id=queued_run_id)
    return recorded_metadata(context, engine, outcome, worker)


def stored_metadata(engine: sa.Engine, run_id: str, worker: str) -> dict[str, dict]:
    """The metadata of each of :data:`md.RUN_ASSETS` of a run stored already."""
    tables = evaluations.case_tables(engine, run_id, limit=md.MAX_TABLE_ROWS)
    return {key: {**values, "worker": worker} for key, values in md.run_metadata(tables).items()}


PROGRESS_LINE_EVERY_S = 1.0
"""A strategy's progress lines in the run's log are at least this far apart (each is an event-log write)."""


def case_progress(context: dg.AssetExecutionContext | dg.OpExecutionContext, version: str):
    """A progress callback that logs a strategy's cases done: every tenth of them, at most one line a second, and
    the last."""
    step, last = [0], [time.monotonic()]

    def progress(done: int, total: int) -> None:
        every = max(1, total // 10)
        now = time.monotonic()
        if done == total or (done // every != step[0] and now - last[0] >= PROGRESS_LINE_EVERY_S):
            step[0], last[0] = done // every, now
            context.log.info(f"{version}: {done}/{total} cases ({100 * done // max(total, 1)}%)")

    return progress


def recorded_metadata(context: dg.AssetExecutionContext | dg.OpExecutionContext, engine: sa.Engine,
                      outcome: evaluations.EvaluationOutcome, worker: str) -> dict[str, dict]:
    """After a stored run: its headline metrics logged, its worker recorded, the metadata of each of
    :data:`md.RUN_ASSETS` read back."""
    version = outcome.strategy_version
    context.log.info(f"{version}: " + " ".join(f"{m}={outcome.averages[m]:.4f}" for m in HEADLINE_METRICS))
    try:  # a run row this step created names its worker now
        run_records.set_worker(engine, outcome.run_id, worker)
    except sa.exc.SQLAlchemyError as exc:
        context.log.warning(f"run {outcome.run_id} is stored, but its worker could not be recorded: {exc}")
    try:  # the run is committed: a failure here must not fail (and re-run) the step
        metadata = md.run_metadata(evaluations.case_tables(engine, outcome.run_id, limit=md.MAX_TABLE_ROWS))
    except sa.exc.SQLAlchemyError as exc:
        context.log.warning(f"run {outcome.run_id} is stored, but its summary could not be read back: {exc}")
        metadata = dict.fromkeys(md.RUN_ASSETS, {"run_id": outcome.run_id})
    return {key: {**values, "worker": worker} for key, values in metadata.items()}
