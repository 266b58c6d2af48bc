"""Asset ``strategy_comparison`` (group ``retrieval_evaluation``), one partition per dataset: the current run of every
strategy against the baseline, and the ``regression_gate`` check; job ``compare_strategies``."""

import dagster as dg

from rag_pipeline.defs.checks import REGRESSION_GATE_SPEC, regression_gate_result
from rag_pipeline.defs.evaluation_metadata import display_number
from rag_pipeline.defs.instance import POOL
from rag_pipeline.defs.partitions import dataset_partitions, every_strategy_of_the_dataset
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.evaluation.runs.queries import replace_comparison_runs
from rag_pipeline.service import analysis
from rag_pipeline.service.analysis import (
    DEFAULT_BASELINE,
    ComparisonError,
    chart_png,
    markdown_image,
    metric_table,
    moved_table,
    significance_table,
)

_NOT_IN_METADATA = {"dataset_version", "knowledge_base", "stale", "gate"}  # separate metadata entries


class ComparisonConfig(dg.Config):
    baseline: str = DEFAULT_BASELINE
    """Strategy version every other strategy is compared with."""
    margin: float = 0.0
    """Regression gate: a loss on nDCG@k smaller than this never fails the gate."""
    alpha: float = 0.05
    """Regression gate: significance level of the Holm-adjusted paired permutation p-value."""
    knowledge_base: str = ""
    """Only when one dataset name is evaluated on several knowledge bases (default: the latest version's)."""
    dataset_version: str = ""
    """A dataset version (content hash or prefix); default: the latest. Runs on other versions never mix in."""
    n_resamples: int = 10000
    """Permutation / bootstrap resamples."""


@dg.asset(
    group_name="strategy_analysis",
    partitions_def=dataset_partitions,
    deps=[dg.AssetDep("evaluation_run_summary", partition_mapping=every_strategy_of_the_dataset)],
    check_specs=[REGRESSION_GATE_SPEC],
    kinds={"postgres", "python"},
    pool=POOL,
)
def strategy_comparison(context: dg.AssetExecutionContext, config: ComparisonConfig, rag_db: RagDatabase):
    """Which strategy version is really better on this dataset: averages, deltas vs the baseline, paired
    significance (permutation test, bootstrap CI, Holm), win/tie/loss, biggest movers, chart."""
    try:
        result = analysis.compare(rag_db.engine(), context.partition_key,
                                  knowledge_base=config.knowledge_base or None,
                                  dataset_version=config.dataset_version or None, baseline=config.baseline,
                                  margin=config.margin, alpha=config.alpha, n_resamples=config.n_resamples)
    except ComparisonError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from exc
    # a stored comparison: retention keeps the runs it refers to (rag_pipeline.service.retention)
    with rag_db.engine().begin() as conn:
        replace_comparison_runs(conn, f"{context.partition_key}|{result.knowledge_base}",
                                [r.run_id for r in result.runs])
    for note in [*result.judged_warnings, *result.notes]:
        context.log.warning(note)
    primary = {p.strategy: p for p in result.paired if p.metric == "ndcg_at_k"}
    yield dg.MaterializeResult(metadata={
        "baseline": result.baseline,
        "strategies": len(result.runs),
        "knowledge_base": result.knowledge_base,
        "dataset_version": result.dataset_version,
        "stale_strategies": dg.MetadataValue.json(result.stale),
        "metrics": dg.MetadataValue.md(metric_table(result)),
        "significance": dg.MetadataValue.md(significance_table(result) if result.paired else "_only the baseline_"),
        "moved_cases": dg.MetadataValue.md(moved_table(result)),
        "chart": dg.MetadataValue.md(markdown_image(chart_png(result), "strategy comparison")),
        "ndcg_delta_vs_baseline": dg.MetadataValue.json({v: display_number(p.delta) for v, p in primary.items()}),
        "ndcg_holm_p": dg.MetadataValue.json({v: display_number(p.p_holm) for v, p in primary.items()}),
        "notes": dg.MetadataValue.json(result.notes),
        "judged_warnings": dg.MetadataValue.json(result.judged_warnings),
        "comparison": dg.MetadataValue.json(result.model_dump(mode="json", exclude=_NOT_IN_METADATA)),
    })
    yield regression_gate_result(result)


compare_strategies_job = dg.define_asset_job(
    "compare_strategies", selection=[strategy_comparison],
    # one step: run in the run's own process (the multiprocess default starts a second Python and loads the code
    # again, seconds of CPU that a click's next evaluation would share)
    executor_def=dg.in_process_executor,
    description="Compare every strategy's current run on one dataset (partition = dataset) with the baseline.")
