"""Jobs: ``evaluate_retrieval`` materialises the ``retrieval_evaluation`` group for one ``<dataset>|<strategy>``
partition; ``prune_evaluation_runs`` removes old runs like ``rag-pipeline runs prune``
(:mod:`rag_pipeline.service.retention`), scheduled by ``nightly_prune`` (off by default); ``evaluate_answers``
materialises ``answers`` and ``answer_metrics`` for one ``<dataset>|<answerer>`` partition and ``summarise_answers``
the dataset's ``answer_run_summary``.
"""

import dagster as dg

from rag_pipeline.defs.evaluation import GROUP
from rag_pipeline.defs.partitions import answer_partitions, dataset_partitions, evaluation_partitions
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.service import retention

evaluate_retrieval_job = dg.define_asset_job(
    "evaluate_retrieval",
    selection=dg.AssetSelection.groups(GROUP),
    partitions_def=evaluation_partitions,
    # Two steps that run one after the other: executing them in the run's own process saves a Python start and
    # a code load per step (the multiprocess default); partitions still run in parallel as separate runs.
    executor_def=dg.in_process_executor,
    description="Evaluate one strategy on one dataset (partition '<dataset>|<strategy>') and store the run.",
)


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
