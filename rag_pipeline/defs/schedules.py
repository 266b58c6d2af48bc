"""``nightly_reevaluation`` (03:00 UTC) and ``nightly_prune`` (04:00 UTC), both **STOPPED** by default: opt-in."""

import dagster as dg

from rag_pipeline.defs.jobs import evaluate_retrieval_job, prune_evaluation_runs
from rag_pipeline.defs.partitions import DATASETS, partition_key, strategy_partitions
from rag_pipeline.settings import datasets_dir


@dg.schedule(
    name="nightly_reevaluation",
    cron_schedule="0 3 * * *",
    execution_timezone="UTC",
    job=evaluate_retrieval_job,
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="03:00 UTC: re-evaluate every current dataset (file present in datasets/) with every strategy.",
)
def nightly_reevaluation(context: dg.ScheduleEvaluationContext):
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    folder = datasets_dir()
    keys = [k for k in context.instance.get_dynamic_partitions(DATASETS)
            if (folder / f"{k}.json").is_file()]
    if not keys:
        return dg.SkipReason(f"no dataset partition has a file in {folder}")
    return [
        dg.RunRequest(run_key=f"nightly:{day}:{key}:{version}", partition_key=partition_key(key, version),
                      tags={"rag/trigger": "nightly_reevaluation"})
        for key in keys
        for version in strategy_partitions.get_partition_keys()
    ]


nightly_prune = dg.ScheduleDefinition(
    name="nightly_prune",
    cron_schedule="0 4 * * *",
    execution_timezone="UTC",
    job=prune_evaluation_runs,
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="04:00 UTC: remove old evaluation runs (keep the 5 newest per dataset × strategy, current and "
                "compared runs).",
)
