"""Fusion tuning of a stored run: re-fuse the pool strategy's current run's pools under every
:func:`~rag_pipeline.analysis.tuning.sweep.grid` configuration and recommend one by cross-validation (no SQL per case,
no embedding). ``rag-pipeline tune`` and the ``fusion_sweep`` asset both call :func:`tune_run`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sqlalchemy as sa

from rag_pipeline.analysis.comparison import ComparisonError, dataset_version_row
from rag_pipeline.analysis.tuning.sweep import DEFAULT_METRIC, FusionConfig, Recommendation, recommend
from rag_pipeline.contracts.errors import NotFoundOrInvalidError
from rag_pipeline.contracts.metrics import METRIC_NAMES
from rag_pipeline.contracts.tuning import FoldChoice, FusionTuning, RankedFusion
from rag_pipeline.evaluation.pools import load_pools
from rag_pipeline.evaluation.queries.knowledge_base import stored_params_hash
from rag_pipeline.evaluation.runs import queries as run_history
from rag_pipeline.retrieval.strategies import (
    FIELD_NAMES,
    Strategy,
    StrategyError,
    load_registry,
    strategy_entry,
    strategy_from_mapping,
)

DEFAULT_POOL_STRATEGY = "hybrid-bm25-v1"
DEFAULT_FOLDS = 5
TOP_CONFIGS = 10
SHALLOW_POOL = 50  # a leg with fewer candidates than this leaves the sweep little to re-rank


class TuneError(NotFoundOrInvalidError, LookupError):
    """Nothing to tune (no current run of the pool strategy), or a name clash; the message says what to do."""


@dataclass
class PoolRun:
    """The stored run whose candidate pools are tuned, and the exact strategy that produced them."""

    run_id: str
    dataset: str
    dataset_version: str
    knowledge_base: str
    strategy: Strategy
    notes: list[str] = field(default_factory=list)


def find_pool_run(conn: sa.Connection, dataset: str, pool_strategy: str = DEFAULT_POOL_STRATEGY,
                  knowledge_base: str | None = None, registry: dict[str, Strategy] | None = None, *,
                  dataset_version: str | None = None) -> PoolRun:
    """The latest-started succeeded run of ``pool_strategy`` on dataset ``dataset`` (its name = the dataset key
    of an ``evaluate_retrieval`` partition), on the dataset's latest version or on ``dataset_version`` (a
    content hash or prefix) — never on a mix. Several knowledge bases: the latest version's (a note says so). The
    strategy is rebuilt from the parameters the run stored, so the tuned strategy keeps the pools' candidate ks.
    Raises :class:`TuneError` naming the command and the partition to run first."""
    try:
        version = dataset_version_row(conn, dataset, knowledge_base, dataset_version)
    except ComparisonError:
        version = None
    row = run_history.latest_of_strategy(conn, pool_strategy, version.dataset_id) if version else None
    if version is None or row is None:
        others = run_history.strategies_with_runs(conn, version.dataset_id) if version else []
        where = (f" and knowledge base {knowledge_base!r}" if knowledge_base else "") + \
            (f" (version {version.content_hash[:12]})" if version else "")
        raise TuneError(
            f"no current succeeded run of strategy {pool_strategy!r} on dataset {dataset!r}{where}, so there "
            f"are no stored pools to tune: evaluate it first (`rag-pipeline evaluate --dataset <file> --strategy "
            f"{pool_strategy}`, or materialise partition '{dataset}|{pool_strategy}' with job "
            f"evaluate_retrieval); current runs on this dataset: {', '.join(others) or '(none)'}")
    notes = []
    if version.kbs > 1:
        notes.append(f"dataset {dataset!r} is evaluated on several knowledge bases; tuning on "
                     f"{row.kb_name!r} (choose with --knowledge-base)")
    strategy = _stored_strategy(row, registry if registry is not None else _registry_or_empty())
    shallow = [f"{leg} {k}" for leg, k in (("vector", strategy.vector_candidate_k),
                                           ("keyword", strategy.keyword_candidate_k)) if 0 < k < SHALLOW_POOL]
    if shallow:
        notes.append(f"{pool_strategy} stores shallow pools ({', '.join(shallow)} candidates per leg): the "
                     f"sweep can only re-rank those; a pool strategy with {SHALLOW_POOL}-100 candidates per "
                     f"leg (e.g. {DEFAULT_POOL_STRATEGY}) leaves more to gain")
    return PoolRun(row.run_id, row.dataset_name, row.content_hash, row.kb_name, strategy, notes)


def _registry_or_empty() -> dict[str, Strategy]:
    try:
        return load_registry()
    except StrategyError:
        return {}


def _stored_strategy(row: sa.Row, registry: dict[str, Strategy]) -> Strategy:
    known = registry.get(row.strategy_version)
    if known is not None and known.params_hash() == row.params_hash:
        return known
    params = {k: v for k, v in (row.strategy_params or {}).items() if k in FIELD_NAMES}
    try:
        return strategy_from_mapping({**params, "version": row.strategy_version,
                                      "description": known.description if known else ""}, where=f"run {row.run_id}")
    except StrategyError as exc:
        raise TuneError(f"the stored parameters of run {row.run_id} do not make a valid strategy: {exc}") from None


def tune_run(conn: sa.Connection, dataset: str, pool_strategy: str = DEFAULT_POOL_STRATEGY,
         metric: str = DEFAULT_METRIC, folds: int = DEFAULT_FOLDS, seed: int = 0, *,
         knowledge_base: str | None = None, version: str | None = None, dataset_version: str | None = None,
         n_resamples: int = 10000, top: int = TOP_CONFIGS) -> tuple[FusionTuning, Recommendation]:
    """Load the pools of the pool strategy's run on ``dataset`` (:func:`find_pool_run`) and :func:`recommend` a
    fusion; ``version`` names the tuned strategy, ``dataset_version`` picks a dataset version. Returns the result
    (:func:`fusion_tuning`) and the recommendation (its strategy, the whole sweep)."""
    if metric not in METRIC_NAMES:
        raise ValueError(f"unknown metric {metric!r}; expected one of {list(METRIC_NAMES)}")
    run = find_pool_run(conn, dataset, pool_strategy, knowledge_base, dataset_version=dataset_version)
    pools = load_pools(conn, run.run_id)
    if not 2 <= folds <= pools.n_cases:
        raise ValueError(f"--folds must be between 2 and the number of cases ({pools.n_cases}), got {folds}")
    rec = recommend(pools, run.strategy, metric, folds, seed, version=version, n_resamples=n_resamples)
    notes = list(run.notes)
    if FusionConfig.from_strategy(rec.strategy) == FusionConfig.from_strategy(run.strategy):
        notes.append(f"the best fusion on these pools is {run.strategy.version}'s own "
                     f"({FusionConfig.from_strategy(run.strategy).label}): the new version only renames it")
    stored = stored_params_hash(conn, rec.strategy.version)
    if stored is not None and stored != rec.strategy.params_hash():
        notes.append(f"strategy version {rec.strategy.version!r} was already run with other parameters; "
                     "choose a new name with --version before adding this one")
    return fusion_tuning(run, rec, folds, seed, notes, top), rec


def fusion_tuning(run: PoolRun, rec: Recommendation, folds: int, seed: int, notes: list[str],
                  top: int = TOP_CONFIGS) -> FusionTuning:
    """The contract ``rag-pipeline tune --format json`` prints: the ``top`` best configurations on all cases
    (ties: grid order), the configuration each fold chose and its held-out mean."""
    cv, base = rec.cv, FusionConfig.from_strategy(rec.base)
    per_fold = [FoldChoice(fold=int(f), cases=int(np.count_nonzero(cv.fold_of == f)), chosen=config.label,
                           held_out_mean=float(cv.out_of_fold[cv.fold_of == f].mean()))
                for f, config in zip(np.unique(cv.fold_of), cv.chosen, strict=True)]
    rows, means = rec.sweep.rows(), rec.sweep.means
    chosen = [c.label for c in cv.chosen]
    recommended = FusionConfig.from_strategy(rec.strategy)
    ranked = [RankedFusion(rank=r + 1, **rows[i], folds_chosen=chosen.count(rows[i]["label"]),
                           is_base=rec.sweep.configs[i] == base, is_recommended=rec.sweep.configs[i] == recommended)
              for r, i in enumerate(sorted(range(len(rows)), key=lambda i: (-means[i], i))[:top])]
    return FusionTuning(
        dataset=run.dataset, dataset_version=run.dataset_version, knowledge_base=run.knowledge_base,
        pool_run_id=run.run_id, pool_strategy=rec.base.version, folds=folds, seed=seed, base_fusion=base.label,
        **rec.summary(), per_fold=per_fold, top_configurations=ranked, strategy=strategy_entry(rec.strategy),
        yaml=rec.yaml, notes=notes)
