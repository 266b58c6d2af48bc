"""Analysis operations on stored runs: compare strategies (significance + regression gate), tune the fusion."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from rag_pipeline.analysis import comparison
from rag_pipeline.analysis.comparison import DEFAULT_BASELINE, ComparisonError
from rag_pipeline.analysis.comparison_report import (
    chart_png,
    metric_table,
    moved_table,
    render_plain,
    render_text,
    significance_table,
)
from rag_pipeline.analysis.tuning.chart import markdown_image, sweep_markdown
from rag_pipeline.analysis.tuning.stages import tune_split
from rag_pipeline.analysis.tuning.stored_run import (
    DEFAULT_FOLDS,
    DEFAULT_POOL_STRATEGY,
    TOP_CONFIGS,
    TuneError,
    tune_run,
)
from rag_pipeline.analysis.tuning.sweep import DEFAULT_METRIC, FusionConfig, Recommendation
from rag_pipeline.contracts.comparison import StrategyComparison
from rag_pipeline.contracts.tuning import FusionTuning, StageTuning, WrittenStrategy
from rag_pipeline.retrieval.registry_file import write_strategy
from rag_pipeline.retrieval.strategies import Strategy, StrategyError, load_registry
from rag_pipeline.service.datasets import dataset_identity
from rag_pipeline.service.labelling import fixes

__all__ = ["DEFAULT_BASELINE", "DEFAULT_FOLDS", "DEFAULT_METRIC", "DEFAULT_POOL_STRATEGY", "TOP_CONFIGS",
           "ComparisonError", "FusionTuning", "StageTuning", "StrategyComparison", "TuneError", "markdown_image",
           "chart_png", "compare", "comparison_ready", "fusion_sweep", "has_stages", "metric_table", "moved_table",
           "render_plain", "render_text", "significance_table", "tune", "tune_stages"]


def compare(engine: sa.Engine, dataset: str, *, knowledge_base: str | None = None,
            dataset_version: str | None = None, baseline: str = DEFAULT_BASELINE, margin: float = 0.0,
            alpha: float = 0.05, n_resamples: int = 10000, named: bool = False) -> StrategyComparison:
    """Compare every strategy's run on one version of ``dataset`` with ``baseline``; those without one: ``stale``."""
    name, kb = (dataset, knowledge_base) if named else dataset_identity(dataset, knowledge_base)
    with engine.connect() as conn:
        selection = comparison.select_runs(conn, name, kb, dataset_version)
        result = comparison.compare(selection.runs, baseline, dataset=name, n_resamples=n_resamples,
                                    dataset_version=selection.dataset_version,
                                    knowledge_base=selection.knowledge_base, stale=selection.stale,
                                    margin=margin, alpha=alpha)
        comparison.attach_top_chunks(conn, result)
        remapped = fixes.remap_note(conn, name, selection.knowledge_base, selection.dataset_version)
    result.notes[:0] = [*selection.notes, *(f"{v}: {why}" for v, why in selection.stale.items()),
                        *([remapped] if remapped else [])]
    return result


def _tune(engine: sa.Engine, dataset: str, pool_strategy: str, metric: str, folds: int, seed: int, *,
          knowledge_base: str | None, version: str | None, dataset_version: str | None, n_resamples: int,
          top: int) -> tuple[FusionTuning, Recommendation]:
    name, kb = dataset_identity(dataset, knowledge_base)
    with engine.connect() as conn:
        return tune_run(conn, name, pool_strategy, metric, folds, seed, knowledge_base=kb, version=version,
                        dataset_version=dataset_version, n_resamples=n_resamples, top=top)


def tune(engine: sa.Engine, dataset: str, pool_strategy: str = DEFAULT_POOL_STRATEGY, metric: str = DEFAULT_METRIC,
         folds: int = DEFAULT_FOLDS, seed: int = 0, *, knowledge_base: str | None = None,
         version: str | None = None, dataset_version: str | None = None, n_resamples: int = 10000,
         top: int = TOP_CONFIGS, write_to: str | Path | None = None) -> FusionTuning:
    """Recommend a fusion for ``dataset`` from the pool strategy's stored pools; ``write_to``: append it there."""
    tuning, rec = _tune(engine, dataset, pool_strategy, metric, folds, seed, knowledge_base=knowledge_base,
                        version=version, dataset_version=dataset_version, n_resamples=n_resamples, top=top)
    if write_to:
        if any("already run with other parameters" in n for n in tuning.notes):
            raise TuneError(f"strategy version {rec.strategy.version!r} was already run with other parameters; "
                            "choose a new name with --version")
        tuning.written = _write(write_to, rec.strategy, f"tuned by `rag-pipeline tune` from run {tuning.pool_run_id} "
                                f"of {rec.base.version} on dataset {tuning.dataset} ({tuning.knowledge_base})")
    return tuning


def fusion_sweep(engine: sa.Engine, dataset: str, pool_strategy: str = DEFAULT_POOL_STRATEGY,
                 metric: str = DEFAULT_METRIC, folds: int = DEFAULT_FOLDS, seed: int = 0, *,
                 knowledge_base: str | None = None, dataset_version: str | None = None) -> tuple[FusionTuning, str]:
    """:func:`tune`, and the metric-vs-weight chart of the whole sweep as markdown (for Dagster metadata)."""
    tuning, rec = _tune(engine, dataset, pool_strategy, metric, folds, seed, knowledge_base=knowledge_base,
                        version=None, dataset_version=dataset_version, n_resamples=10000, top=TOP_CONFIGS)
    title = (f"{tuning.dataset}: mean {tuning.metric} of {tuning.pool_strategy}'s pools ({tuning.cases} cases) "
             "vs vector weight")
    return tuning, sweep_markdown(rec.sweep, FusionConfig.from_strategy(rec.base), title)


def has_stages(pool_strategy: str) -> bool:
    """Does the registry's ``pool_strategy`` complete its pools or rerank (then ``tune`` sweeps those stages)?"""
    try:
        strategy = load_registry().get(pool_strategy)
    except StrategyError:
        return False
    return strategy is not None and (strategy.complete_pool or strategy.rerank is not None)


def tune_stages(engine: sa.Engine, dataset: str, train_dataset: str | None, pool_strategy: str,
                metric: str = DEFAULT_METRIC, folds: int = DEFAULT_FOLDS, seed: int = 0, *,
                knowledge_base: str | None = None, version: str | None = None, n_resamples: int = 10000,
                top: int = TOP_CONFIGS, write_to: str | Path | None = None) -> StageTuning:
    """Choose the first-stage fusion, completion and rerank mix on ``train_dataset``; report it on ``dataset``."""
    name, kb = dataset_identity(dataset, knowledge_base)
    train = dataset_identity(train_dataset, knowledge_base)[0] if train_dataset else None
    with engine.connect() as conn:
        tuning, strategy = tune_split(conn, name, train, pool_strategy, metric, folds, seed, knowledge_base=kb,
                                      version=version, n_resamples=n_resamples, top=top)
    if write_to:
        tuning.written = _write(write_to, strategy, f"tuned by `rag-pipeline tune` on dataset "
                                f"{tuning.train.dataset} from run {tuning.train.run_id} of {tuning.pool_strategy}")
    return tuning


def _write(path: str | Path, strategy: Strategy, comment: str) -> WrittenStrategy:
    return WrittenStrategy(path=str(Path(path).resolve()), status=write_strategy(path, strategy, comment))


def comparison_ready(engine: sa.Engine, dataset: str, baseline: str = DEFAULT_BASELINE) -> bool | str:
    """True when the baseline and another strategy have a succeeded run on the latest version; else why not."""
    try:
        with engine.connect() as conn:
            selection = comparison.select_runs(conn, dataset)
    except comparison.ComparisonError as exc:
        return str(exc)
    versions = {r.version for r in selection.runs}
    if baseline not in versions:
        return f"the baseline {baseline} has no run on version {selection.dataset_version[:12]} of {dataset!r} yet"
    if len(versions) < 2:
        return f"only the baseline has a run on version {selection.dataset_version[:12]} of {dataset!r}"
    return True
