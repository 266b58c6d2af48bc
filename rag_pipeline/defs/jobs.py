"""Jobs: ``evaluate_retrieval``, ``evaluate_strategies`` (what the HTTP API and the console submit),
``prune_evaluation_runs`` (scheduled by ``nightly_prune``), ``evaluate_answers`` and ``summarise_answers``."""

import dagster as dg

from rag_pipeline.defs.evaluation import (
    GROUP,
    RETRY_POLICY,
    case_progress,
    dataset_metadata,
    evaluation_dataset,
    fail_fast_unless_transient,
    name_the_worker,
    raise_failures,
    recorded_metadata,
    stored_metadata,
    this_attempts_run,
    wait_for_the_database,
)
from rag_pipeline.defs.instance import POOL
from rag_pipeline.defs.lineage import observe_dataset
from rag_pipeline.defs.partitions import answer_partitions, dataset_partitions, evaluation_partitions, partition_key
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.service import datasets, evaluations, queued_runs, retention

QUEUE_TAG = "rag/queue_id"  # the queue id of the click an ``evaluate_strategies`` run carries out
ROW_TAG = "rag/evaluation_run"  # the one queued row a run of a spread click carries out (see spreads_clicks)


def spreads_clicks(instance: dg.DagsterInstance) -> bool:
    """Whether a click becomes one ``evaluate_strategies`` run per strategy instead of one run: when the instance
    hands runs to Celery workers (deploy/celery/dagster.yaml), so the click's strategies run on every free worker
    at once; elsewhere one run, its steps in one process, shares the loaded code, models and indexes."""
    return any(cls.__name__ == "CeleryRunLauncher" for cls in type(instance.run_launcher).__mro__)


evaluate_retrieval_job = dg.define_asset_job(
    "evaluate_retrieval",
    selection=dg.AssetSelection.groups(GROUP),
    partitions_def=evaluation_partitions,
    # Two steps that run one after the other: executing them in the run's own process saves a Python start and
    # a code load per step (the multiprocess default); partitions still run in parallel as separate runs.
    executor_def=dg.in_process_executor,
    description="Evaluate one strategy on one dataset (partition '<dataset>|<strategy>') and store the run.",
)


class StrategiesConfig(dg.Config):
    dataset_id: str
    """The stored dataset version to evaluate (its name is the dataset partition)."""
    runs: dict[str, str]
    """Strategy version → the ``queued`` evaluation run it carries out (created by the HTTP API); '' = a new run."""
    batch_size: int = 64
    """Cases per retrieval batch (as ``evaluate_retrieval``'s ``evaluation_run``)."""
    readers: int = 0
    """Read connections searching batches in parallel; 0 = ``RAG_EVAL_READERS`` or 2."""
    strict: bool = False
    """Refuse to run when any label is not a searchable chunk."""


@dg.op(retry_policy=RETRY_POLICY, pool=POOL,
       description="Evaluate the click's strategies on the stored dataset version at once (forked processes sharing "
                   "the loaded indexes), each stored atomically as its own run; records each strategy's "
                   "'<dataset>|<strategy>' partition of evaluation_dataset, retrieval_candidates, case_metrics and "
                   "evaluation_run_summary. A strategy that fails does not stop the others; the step then fails "
                   "naming each.")
def evaluate_click(context: dg.OpExecutionContext, config: StrategiesConfig, rag_db: RagDatabase) -> None:
    engine = rag_db.engine(config.readers or None)
    wait_for_the_database(context, rag_db)
    with fail_fast_unless_transient():
        if queue_id := context.run.tags.get(QUEUE_TAG):  # this run's rows of the click carry its id from now on
            queued_runs.claim(engine, queue_id, context.run_id, [i for i in config.runs.values() if i])
        stored = datasets.describe_stored_dataset(engine, config.dataset_id)
        kb_version = observe_dataset(context.instance, engine, stored.name, stored.knowledge_base)
    partitions = {version: str(partition_key(stored.name, version)) for version in config.runs}
    if context.retry_number == 0:
        metadata = dataset_metadata(stored, stored.path, kb_version)
        for key in partitions.values():
            context.log_event(dg.AssetMaterialization(asset_key=evaluation_dataset.key, partition=key,
                                                      metadata=metadata))
    attempts = {version: this_attempts_run(context, rag_db, run_id or None, partitions[version])
                for version, run_id in config.runs.items()}
    worker = name_the_worker(context, rag_db, [run_id for run_id, _ in attempts.values() if run_id])
    recorded = {}
    for version, (run_id, done) in attempts.items():  # stored by an earlier attempt of this step: recorded only
        if done:
            context.log.info(f"{version}: evaluation run {run_id} was stored by an earlier attempt of this step; "
                             "not evaluated again")
            with fail_fast_unless_transient():
                recorded[version] = stored_metadata(engine, str(run_id), worker)
    runs = [evaluations.StoredRun(version, run_id, partitions[version])
            for version, (run_id, done) in attempts.items() if not done]
    with fail_fast_unless_transient():
        results = evaluations.evaluate_stored_click(
            engine, stored.dataset_id, runs, batch_size=config.batch_size,
            readers=rag_db.reader_count(config.readers), strict=config.strict, dagster_run_id=context.run_id,
            progress=lambda version, _cases: case_progress(context, version), logger=context.log)
    failed: dict[str, BaseException] = {}
    for run, result in zip(runs, results, strict=True):
        if isinstance(result, BaseException):
            failed[run.strategy_version] = result
        else:
            recorded[run.strategy_version] = recorded_metadata(context, engine, result, worker)
    for version, metadata in recorded.items():
        for asset, values in metadata.items():
            context.log_event(dg.AssetMaterialization(asset_key=asset, partition=partitions[version],
                                                      metadata=values))
    with fail_fast_unless_transient():
        raise_failures(failed)


# One step for the click: its strategies run at once in processes forked from it (rag_pipeline/evaluation/click.py).
@dg.job(executor_def=dg.in_process_executor, tags={"rag/kind": "evaluation"},
        description="Evaluate several strategies of one stored dataset version in one run and one step, at once, "
                    "each recording its '<dataset>|<strategy>' partition's materialisations (what the HTTP API "
                    "and the console submit).")
def evaluate_strategies():
    evaluate_click()


class PruneConfig(dg.Config):
    keep_last: int = 5
    """Keep this many newest runs of every dataset × knowledge base × strategy (current runs are always kept)."""
    older_than_days: float = 0.0
    """Only remove runs started at least this many days ago (0 = any age)."""
    dataset: str = ""
    """Only this dataset name (default: every dataset)."""
    dry_run: bool = False
    """Report what would be removed, remove nothing."""
    include_compared: bool = False
    """Also remove runs the latest stored comparison of a dataset refers to."""


@dg.op(description="Remove old evaluation runs (retention); logs runs, candidate rows and bytes freed.")
def prune_evaluation_runs_op(context: dg.OpExecutionContext, config: PruneConfig, rag_db: RagDatabase) -> dg.Output:
    result = retention.prune_runs(rag_db.engine(), keep_last=config.keep_last,
                                  older_than_days=config.older_than_days or None, dataset=config.dataset or None,
                                  dry_run=config.dry_run, include_compared=config.include_compared)
    verb = "would remove" if result.dry_run else "removed"
    context.log.info(f"{verb} {len(result.runs)} run(s) and {len(result.answer_runs)} answer run(s), "
                     f"{result.candidate_rows} candidate rows, "
                     f"{result.bytes_freed} bytes; kept {result.kept_for_comparison} run(s) a stored comparison "
                     "refers to")
    return dg.Output(None, metadata={
        "pruned_runs": len(result.runs), "pruned_candidate_rows": result.candidate_rows,
        "bytes_freed": result.bytes_freed, "dry_run": result.dry_run,
        "kept_for_comparison": result.kept_for_comparison, "pruned_answer_runs": len(result.answer_runs)})

@dg.job(description="Remove old evaluation runs: keep the newest of each dataset × strategy, every current run "
                    "and every run a stored comparison refers to (rag-pipeline runs prune).")
def prune_evaluation_runs():
    prune_evaluation_runs_op()


evaluate_answers_job = dg.define_asset_job(
    "evaluate_answers",
    selection=dg.AssetSelection.assets("answers", "answer_metrics"),
    partitions_def=answer_partitions,
    executor_def=dg.in_process_executor,
    description="Produce and score the answers of one answerer on one dataset (partition '<dataset>|<answerer>').",
)
summarise_answers_job = dg.define_asset_job(
    "summarise_answers", selection=dg.AssetSelection.assets("answer_run_summary"),
    partitions_def=dataset_partitions, description="The latest answer run of every answerer of one dataset.")
