"""Asset ``fusion_sweep`` (group ``strategy_analysis``), one partition per dataset, and job ``tune_fusion``: the
computation of ``rag-pipeline tune`` (:func:`rag_pipeline.service.analysis.fusion_sweep`); it writes nothing."""

import dagster as dg

from rag_pipeline.contracts.metrics import METRIC_LABELS
from rag_pipeline.defs.evaluation_metadata import display_float
from rag_pipeline.defs.instance import POOL
from rag_pipeline.defs.partitions import dataset_partitions, every_strategy_of_the_dataset
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.retrieval.strategies import StrategyError
from rag_pipeline.service import analysis
from rag_pipeline.service.analysis import DEFAULT_FOLDS, DEFAULT_METRIC, DEFAULT_POOL_STRATEGY, FusionTuning, TuneError


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


def top_configurations_markdown(t: FusionTuning) -> str:
    """The best configurations as a markdown table (the pool strategy's and the recommended one marked)."""
    columns = list(dict.fromkeys([t.metric, "ndcg_at_k", "recall_at_k", "reciprocal_rank", "precision_at_k"]))
    head = "| # | configuration | " + " | ".join(METRIC_LABELS.get(c, c) for c in columns) + " | folds chose it | |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in t.top_configurations:
        mark = ", ".join(text for flag, text in ((r.is_recommended, "**recommended**"),
                                                 (r.is_base, "pool strategy")) if flag)
        lines.append(f"| {r.rank} | {r.label} | " + " | ".join(f"{getattr(r.metrics, c):.4f}" for c in columns)
                     + f" | {r.folds_chosen} | {mark} |")
    return "\n".join(lines)


def headline_markdown(t: FusionTuning) -> str:
    return (f"**{t.recommended_version}** ({t.recommended}): {t.folds}-fold cross-validated {t.metric} "
            f"**{t.cv_mean:.4f}** (95% CI {t.cv_ci[0]:.4f}–{t.cv_ci[1]:.4f}), predicted {t.predicted_mean:.4f}; "
            f"{t.pool_strategy}'s own fusion ({t.base_fusion}) {t.base_mean:.4f}, gain {t.gain:+.4f} "
            f"(95% CI {t.gain_ci[0]:+.4f}–{t.gain_ci[1]:+.4f}, p={t.p_value:.3g}); recall ceiling "
            f"{t.recall_ceiling:.4f}.")


def fusion_sweep_metadata(t: FusionTuning, sweep_chart: str) -> dict:
    """The asset's metadata (pure: testable without a Dagster run)."""
    yaml_block = ("```yaml\n# paste under `strategies:` in rag_pipeline/retrieval/strategies.yaml (or your "
                  "RAG_STRATEGIES_FILE)\n" + t.yaml.rstrip("\n") + "\n```")
    return {
        "headline": dg.MetadataValue.md(headline_markdown(t)),
        "recommended": t.recommended,
        "recommended_version": t.recommended_version,
        "metric": t.metric,
        "cv_mean": display_float(t.cv_mean),
        "cv_ci_low": display_float(t.cv_ci[0]),
        "cv_ci_high": display_float(t.cv_ci[1]),
        "predicted_mean": display_float(t.predicted_mean),
        "pool_strategy_mean": display_float(t.base_mean),
        "gain": display_float(t.gain),
        "gain_ci_low": display_float(t.gain_ci[0]),
        "gain_ci_high": display_float(t.gain_ci[1]),
        "gain_p_value": display_float(t.p_value),
        "recall_ceiling": display_float(t.recall_ceiling),
        "strategy_yaml": dg.MetadataValue.md(yaml_block),
        "sweep_chart": dg.MetadataValue.md(sweep_chart),
        "top_configurations": dg.MetadataValue.md(top_configurations_markdown(t)),
        "fold_choices": dg.MetadataValue.json(t.model_dump(mode="json")["per_fold"]),
        "pool_strategy": t.pool_strategy,
        "pool_run_id": t.pool_run_id,
        "knowledge_base": t.knowledge_base,
        "dataset_version": t.dataset_version,
        "cases": t.cases,
        "configurations": t.configurations,
        "notes": dg.MetadataValue.json(t.notes),
        "summary": dg.MetadataValue.json(t.model_dump(mode="json", exclude={"yaml", "top_configurations", "written"})),
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
        result, chart = analysis.fusion_sweep(rag_db.engine(), context.partition_key, config.pool_strategy,
                                              config.metric, config.folds, config.seed,
                                              knowledge_base=config.knowledge_base or None,
                                              dataset_version=config.dataset_version or None)
    except (TuneError, StrategyError, ValueError) as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from exc
    for note in result.notes:
        context.log.warning(note)
    context.log.info(headline_markdown(result).replace("**", ""))
    return dg.MaterializeResult(metadata=fusion_sweep_metadata(result, chart))


tune_fusion_job = dg.define_asset_job(
    "tune_fusion", selection=[fusion_sweep],
    description="Tune the fusion of one dataset (partition = dataset) from the pool strategy's stored "
                "candidate pools, with cross-validation; emits a ready-to-add strategy definition.")
