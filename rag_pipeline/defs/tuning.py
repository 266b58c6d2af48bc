"""Asset ``fusion_sweep`` (group ``retrieval_evaluation``), one partition per dataset, and job ``tune_fusion``.

Every evaluation run stores each case's full candidate pool with both legs' scores and ranks, so the
fusion can be re-tuned offline from the database, without re-querying the knowledge base: the asset reads
the current run of a "pool" strategy that stores deep pools (default ``hybrid-bm25-v1``: USE + BM25,
100 candidates per leg), re-fuses it under every configuration of the grid (weighted fusion with each
normalisation x vector weight in steps of 0.05, RRF per k) and picks one by k-fold cross-validation over
cases (:func:`rag_pipeline.analysis.tuning.recommend`, shared with ``rag-pipeline tune`` through
:func:`rag_pipeline.service.analysis.tune`).

Like ``strategy_comparison`` it depends on every strategy partition of ``evaluation_run_summary`` for its
dataset and is not part of the ``evaluate_retrieval`` job. It writes nothing: adding the recommended
strategy to the registry is the user's decision (paste the YAML, or ``rag-pipeline tune
--write-strategy``).
"""

import dagster as dg

from rag_pipeline.defs.evaluation_metadata import display_float
from rag_pipeline.defs.instance import POOL
from rag_pipeline.defs.partitions import dataset_partitions, every_strategy_of_the_dataset
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.service import analysis
from rag_pipeline.service.analysis import (
    DEFAULT_FOLDS,
    DEFAULT_METRIC,
    DEFAULT_POOL_STRATEGY,
    TOP_CONFIGS,
    FusionConfig,
    TuneError,
    TuneResult,
    sweep_markdown,
)
from rag_pipeline.service.catalog import StrategyError
from rag_pipeline.service.evaluations import METRIC_LABELS


class FusionSweepConfig(dg.Config):
    pool_strategy: str = DEFAULT_POOL_STRATEGY
    """Strategy whose current run's candidate pools are re-fused (deep pools: 50-100 candidates per leg)."""
    metric: str = DEFAULT_METRIC
    """Metric to maximise: precision_at_k, recall_at_k, reciprocal_rank, ndcg_at_k, hit_at_k,
    average_precision_at_k or r_precision."""
    folds: int = DEFAULT_FOLDS
    """Cross-validation folds over cases."""
    seed: int = 0
    """Seed of the fold assignment and of the bootstrap / permutation resamples."""
    knowledge_base: str = ""
    """Only when one dataset name is evaluated on several knowledge bases (default: the latest version's)."""
    dataset_version: str = ""
    """A dataset version (content hash or prefix); default: the latest. Runs on other versions never mix in."""


def top_configurations_markdown(result: TuneResult) -> str:
    """The best configurations as a markdown table (the pool strategy's and the recommended one marked)."""
    metric = result.recommendation.metric
    columns = list(dict.fromkeys([metric, "ndcg_at_k", "recall_at_k", "reciprocal_rank", "precision_at_k"]))
    head = "| # | configuration | " + " | ".join(METRIC_LABELS.get(c, c) for c in columns) + " | folds chose it | |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in result.top_configurations(TOP_CONFIGS):
        mark = ", ".join(text for flag, text in ((r["is_recommended"], "**recommended**"),
                                                 (r["is_base"], "pool strategy")) if flag)
        lines.append(f"| {r['rank']} | {r['label']} | " + " | ".join(f"{r[c]:.4f}" for c in columns)
                     + f" | {r['folds_chosen']} | {mark} |")
    return "\n".join(lines)


def headline_markdown(result: TuneResult) -> str:
    rec = result.recommendation
    m, cv = rec.metric, rec.cv
    return (f"**{rec.strategy.version}** ({FusionConfig.from_strategy(rec.strategy).label}): "
            f"{result.folds}-fold cross-validated {m} **{cv.mean:.4f}** (95% CI {cv.ci[0]:.4f}–{cv.ci[1]:.4f}), "
            f"predicted {rec.predicted_mean:.4f}; {rec.base.version}'s own fusion "
            f"({result.base_config.label}) {rec.base_mean:.4f}, gain {rec.gain:+.4f} "
            f"(95% CI {rec.gain_ci[0]:+.4f}–{rec.gain_ci[1]:+.4f}, p={rec.p_value:.3g}); recall ceiling "
            f"{rec.recall_ceiling:.4f}.")


def fusion_sweep_metadata(result: TuneResult) -> dict:
    """The asset's metadata (pure: testable without a Dagster run)."""
    rec, run = result.recommendation, result.pool_run
    title = (f"{run.dataset}: mean {rec.metric} of {rec.base.version}'s pools "
             f"({rec.cv.fold_of.size} cases) vs vector weight")
    yaml_block = ("```yaml\n# paste under `strategies:` in rag_pipeline/retrieval/strategies.yaml (or your "
                  "RAG_STRATEGIES_FILE)\n" + rec.yaml.rstrip("\n") + "\n```")
    return {
        "headline": dg.MetadataValue.md(headline_markdown(result)),
        "recommended": FusionConfig.from_strategy(rec.strategy).label,
        "recommended_version": rec.strategy.version,
        "metric": rec.metric,
        "cv_mean": display_float(rec.cv.mean),
        "cv_ci_low": display_float(rec.cv.ci[0]),
        "cv_ci_high": display_float(rec.cv.ci[1]),
        "predicted_mean": display_float(rec.predicted_mean),
        "pool_strategy_mean": display_float(rec.base_mean),
        "gain": display_float(rec.gain),
        "gain_ci_low": display_float(rec.gain_ci[0]),
        "gain_ci_high": display_float(rec.gain_ci[1]),
        "gain_p_value": display_float(rec.p_value),
        "recall_ceiling": display_float(rec.recall_ceiling),
        "strategy_yaml": dg.MetadataValue.md(yaml_block),
        "sweep_chart": dg.MetadataValue.md(sweep_markdown(rec.sweep, result.base_config, title)),
        "top_configurations": dg.MetadataValue.md(top_configurations_markdown(result)),
        "fold_choices": dg.MetadataValue.json(result.per_fold()),
        "pool_strategy": rec.base.version,
        "pool_run_id": run.run_id,
        "knowledge_base": run.knowledge_base,
        "dataset_version": run.dataset_version,
        "cases": int(rec.cv.fold_of.size),
        "configurations": len(rec.sweep.configs),
        "notes": dg.MetadataValue.json(result.notes),
        "summary": dg.MetadataValue.json({k: v for k, v in result.as_dict().items()
                                          if k not in ("yaml", "top_configurations")}),
    }


@dg.asset(
    group_name="strategy_analysis",
    partitions_def=dataset_partitions,
    deps=[dg.AssetDep("evaluation_run_summary", partition_mapping=every_strategy_of_the_dataset)],
    kinds={"postgres", "python", "numpy"},
    pool=POOL,
)
def fusion_sweep(context: dg.AssetExecutionContext, config: FusionSweepConfig, rag_db: RagDatabase):
    """Tuned fusion for this dataset, from stored candidate pools (no re-retrieval): every weight (step
    0.05) x normalisation (none, min-max, z-score, rank, DBSF) and RRF k in {1, 5, 10, 20, 40, 60, 80},
    re-applied to the pools of the pool strategy's current run; the choice is k-fold cross-validated over
    cases. Metadata: cross-validated metric with bootstrap 95% CI, predicted mean, gain over the pool
    strategy's own fusion (CI, p), recall ceiling, the ready-to-paste strategy YAML, the metric-vs-weight
    chart per normalisation and the top-10 configurations."""
    try:
        result = analysis.tune(rag_db.engine(), context.partition_key, config.pool_strategy, config.metric,
                               config.folds, config.seed, knowledge_base=config.knowledge_base or None,
                               dataset_version=config.dataset_version or None)
    except (TuneError, StrategyError, ValueError) as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from exc
    for note in result.notes:
        context.log.warning(note)
    context.log.info(headline_markdown(result).replace("**", ""))
    return dg.MaterializeResult(metadata=fusion_sweep_metadata(result))


tune_fusion_job = dg.define_asset_job(
    "tune_fusion", selection=[fusion_sweep],
    description="Tune the fusion of one dataset (partition = dataset) from the pool strategy's stored "
                "candidate pools, with cross-validation; emits a ready-to-add strategy definition.")
