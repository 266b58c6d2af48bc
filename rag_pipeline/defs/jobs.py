"""Jobs: ``evaluate_retrieval``, ``evaluate_strategies`` (what the HTTP API and the console submit),
``prune_evaluation_runs`` (scheduled by ``nightly_prune``), ``evaluate_answers`` and ``summarise_answers``."""

import dagster as dg

from rag_pipeline.defs.evaluation import (
    GROUP,
    RETRY_POLICY,
    EvaluationRunConfig,
    dataset_metadata,
    evaluate_partition,
    evaluation_dataset,
    fail_fast_unless_transient,
    name_the_worker,
    this_attempts_run,
)
from rag_pipeline.defs.instance import POOL
from rag_pipeline.defs.lineage import observe_dataset
from rag_pipeline.defs.partitions import answer_partitions, dataset_partitions, evaluation_partitions, partition_key
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.service import datasets, queued_runs, retention

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


@dg.op(out=dg.DynamicOut(dict), retry_policy=RETRY_POLICY, pool=POOL,
       description="The stored dataset version: its evaluation_dataset materialisation for every strategy's "
                   "partition, then one evaluate_strategy step per strategy.")
def stored_dataset(context: dg.OpExecutionContext, config: StrategiesConfig, rag_db: RagDatabase):
    engine = rag_db.engine()
    with fail_fast_unless_transient():
        if queue_id := context.run.tags.get(QUEUE_TAG):  # this run's rows of the click carry its id from now on
            queued_runs.claim(engine, queue_id, context.run_id, [i for i in config.runs.values() if i])
        stored = datasets.describe_stored_dataset(engine, config.dataset_id)
        kb_version = observe_dataset(context.instance, engine, stored.name, stored.knowledge_base)
    metadata = dataset_metadata(stored, stored.path, kb_version)
    settings = EvaluationRunConfig(batch_size=config.batch_size, readers=config.readers, strict=config.strict)
    for version, run_id in config.runs.items():
        key = str(partition_key(stored.name, version))
        context.log_event(dg.AssetMaterialization(asset_key=evaluation_dataset.key, partition=key, metadata=metadata))
        yield dg.DynamicOutput({"dataset_id": stored.dataset_id, "strategy": version, "partition": key,
                                "run_id": run_id, **settings.model_dump(exclude={"evaluation_run_id"})},
                               mapping_key=queued_runs.strategy_step(version))


@dg.op(retry_policy=RETRY_POLICY, pool=POOL,
       description="Evaluate one strategy on the stored dataset version, stored atomically as one run; records "
                   "the materialisations of its partition's retrieval_candidates, case_metrics and "
                   "evaluation_run_summary.")
def evaluate_strategy(context: dg.OpExecutionContext, rag_db: RagDatabase, item: dict) -> None:
    queued_run_id, stored = this_attempts_run(context, rag_db, item["run_id"] or None, item["partition"])
    worker = name_the_worker(context, rag_db, queued_run_id)
    metadata = evaluate_partition(context, rag_db, item["dataset_id"], item["strategy"], item["partition"],
                                  batch_size=item["batch_size"], readers=item["readers"], strict=item["strict"],
                                  queued_run_id=queued_run_id, worker=worker, stored=stored)
    for asset, values in metadata.items():
        context.log_event(dg.AssetMaterialization(asset_key=asset, partition=item["partition"], metadata=values))


# One process for every step (the in-process executor): the code and each embedding model load once per run.
@dg.job(executor_def=dg.in_process_executor, tags={"rag/kind": "evaluation"},
        description="Evaluate several strategies of one stored dataset version in one run: a step per strategy, "
                    "each recording its '<dataset>|<strategy>' partition's materialisations (what the HTTP API "
                    "and the console submit).")
def evaluate_strategies():
    stored_dataset().map(evaluate_strategy)


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
