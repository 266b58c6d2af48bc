"""The Dagster ``Definitions`` of rag_pipeline (``dagster dev -w workspace.yaml``, ``-m rag_pipeline.definitions``),
assembled from the adapters of :mod:`rag_pipeline.defs`."""

import dagster as dg

from rag_pipeline.defs.answers.assets import answer_metrics, answer_partitions_sensor, answer_run_summary, answers
from rag_pipeline.defs.checks import label_integrity
from rag_pipeline.defs.comparison import compare_strategies_job, strategy_comparison
from rag_pipeline.defs.evaluation import evaluation_dataset, evaluation_run
from rag_pipeline.defs.jobs import (
    evaluate_answers_job,
    evaluate_retrieval_job,
    evaluate_strategies,
    prune_evaluation_runs,
    summarise_answers_job,
)
from rag_pipeline.defs.knowledge_base import ingest_knowledge_base_job, knowledge_base
from rag_pipeline.defs.lineage import dataset_knowledge_base, knowledge_base_versions
from rag_pipeline.defs.resources import rag_database
from rag_pipeline.defs.schedules import nightly_prune, nightly_reevaluation
from rag_pipeline.defs.sensors import (
    comparison_after_evaluation,
    new_dataset_sensor,
    queued_evaluations,
    reevaluate_stale_runs,
    runs_outside_dagster,
)
from rag_pipeline.defs.tuning import fusion_sweep, tune_fusion_job

defs = dg.Definitions(
    assets=[knowledge_base, dataset_knowledge_base, evaluation_dataset, evaluation_run, strategy_comparison,
            fusion_sweep, answers, answer_metrics, answer_run_summary],
    asset_checks=[label_integrity],
    jobs=[ingest_knowledge_base_job, evaluate_retrieval_job, evaluate_strategies, compare_strategies_job,
          tune_fusion_job, prune_evaluation_runs, evaluate_answers_job, summarise_answers_job],
    sensors=[new_dataset_sensor, comparison_after_evaluation, runs_outside_dagster, knowledge_base_versions,
             reevaluate_stale_runs, answer_partitions_sensor, queued_evaluations],
    schedules=[nightly_reevaluation, nightly_prune],
    resources={"rag_db": rag_database()},
)
