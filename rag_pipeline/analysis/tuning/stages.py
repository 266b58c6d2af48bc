"""Re-fusing stored pools through the optional stages (complete pools, the rerank stage) offline, in the online
order (:mod:`rag_pipeline.retrieval.stages`), and choosing on a train dataset to report on a test one
(:func:`tune_split`): docs/strategies.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import sqlalchemy as sa

from rag_pipeline.analysis.statistics import bootstrap_ci, paired_permutation_test
from rag_pipeline.analysis.tuning.stored_run import TuneError, find_pool_run
from rag_pipeline.analysis.tuning.sweep import FusionConfig, SweepResult, cross_validate_sweep
from rag_pipeline.contracts.tuning import RankedStage, SplitTest, SplitTrain, StageTuning
from rag_pipeline.evaluation.metrics import METRIC_NAMES, batch_metrics
from rag_pipeline.evaluation.pools import PoolSet, load_pools
from rag_pipeline.retrieval.fusion import fuse_batch, normalize_batch, order_batch
from rag_pipeline.retrieval.strategies import Strategy, StrategyError, strategy_entry, strategy_to_yaml

FIRST_STAGE_NORMALIZATIONS = ("minmax", "zscore")
RERANK_NORMALIZATIONS = ("minmax", "zscore")
STEPS = 10  # weights i / 10


@dataclass(frozen=True)
class StageConfig:
    """First-stage fusion, completion, and the rerank mix (``rerank_weight`` None: no rerank stage)."""

    first: FusionConfig
    complete: bool = False
    rerank_weight: float | None = None
    rerank_normalization: str = "minmax"

    @classmethod
    def from_strategy(cls, strategy: Strategy) -> StageConfig:
        rerank = strategy.rerank
        return cls(FusionConfig.from_strategy(strategy), strategy.complete_pool,
                   None if rerank is None else float(rerank.weight),
                   "minmax" if rerank is None else rerank.normalization)

    @property
    def label(self) -> str:
        text = self.first.label + (" +complete" if self.complete else "")
        if self.rerank_weight is not None:
            text += f" -> rerank {self.rerank_normalization} {self.rerank_weight:.2f}"
        return text

    def apply_to(self, base: Strategy, version: str, description: str = "") -> Strategy:
        """``base`` with this configuration (its rerank method, model and top_n kept), renamed."""
        changes: dict[str, Any] = {"complete_pool": self.complete}
        if base.rerank is not None and self.rerank_weight is not None:
            changes["rerank"] = {**base.rerank.model_dump(), "weight": self.rerank_weight,
                                 "normalization": self.rerank_normalization}
        return self.first.apply_to(base, version, description).replace(**changes)


def has_completed_scores(pools: PoolSet) -> bool:
    """Do the pools hold completed scores (a leg score without a leg rank)?"""
    return bool(np.any(pools.mask & ~np.isnan(pools.vector_score) & np.isnan(pools.vector_rank))
                or np.any(pools.mask & ~np.isnan(pools.keyword_score) & np.isnan(pools.keyword_rank)))


def stage_grid(base: Strategy, pools: PoolSet) -> tuple[StageConfig, ...]:
    """Every configuration the stored pools of ``base``'s run can be re-fused under (own configuration first)."""
    own = StageConfig.from_strategy(base)
    if base.rerank is not None and base.rerank.top_n is not None:
        firsts, completes = [own.first], [own.complete]
    else:
        firsts = [FusionConfig("weighted", n, i / STEPS, (STEPS - i) / STEPS)
                  for n in FIRST_STAGE_NORMALIZATIONS for i in range(STEPS + 1)]
        completes = [False, True] if has_completed_scores(pools) else [False]
    reranks = [(i / STEPS, n) for n in RERANK_NORMALIZATIONS for i in range(STEPS + 1)] \
        if base.rerank is not None else [(None, "minmax")]
    configs = [own] + [StageConfig(f, c, w, n) for f in firsts for c in completes for w, n in reranks]
    return tuple(c for c in dict.fromkeys(configs) if _valid_for(c, base))


def _valid_for(config: StageConfig, base: Strategy) -> bool:
    """Does ``config`` make a valid strategy of ``base``?"""
    try:
        config.apply_to(base, base.version)
    except StrategyError:
        return False
    return True


def _first_stage(pools: PoolSet, config: StageConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first-stage final scores, slot order, 1-based first-stage rank) of every slot."""
    vs, ks = pools.vector_score, pools.keyword_score
    if not config.complete:  # a run without completion has no score where the leg has no rank
        vs = np.where(np.isnan(pools.vector_rank), np.nan, vs)
        ks = np.where(np.isnan(pools.keyword_rank), np.nan, ks)
    first = fuse_batch(config.first, vs, ks, pools.vector_rank, pools.keyword_rank, pools.mask)
    order = order_batch(first, vs, pools.chunk_rank, pools.mask)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(1, pools.pool_size + 1), axis=1)
    return first, order, rank


def stage_order(pools: PoolSet, config: StageConfig, top_n: int | None = None, *,
                _first: tuple | None = None) -> np.ndarray:
    """Per-case slot indices, best first, under ``config`` (padding last)."""
    first, order, rank = _first if _first is not None else _first_stage(pools, config)
    if config.rerank_weight is None:
        return order
    if pools.rerank_score is None:
        raise ValueError("these pools were loaded without rerank scores")
    head = pools.mask & (rank <= (top_n if top_n is not None else pools.pool_size))
    w = config.rerank_weight
    method = config.rerank_normalization
    final = (w * normalize_batch(np.where(head, pools.rerank_score, np.nan), method, head)
             + (1.0 - w) * normalize_batch(np.where(head, first, np.nan), method, head))
    if np.any(head & np.isnan(final)):
        raise ValueError("a re-scored candidate has no stored rerank_score; was the run made with this rerank stage?")
    return np.lexsort((rank, np.where(head, -final, 0.0), ~head), axis=-1)


def evaluate_stage_configs(pools: PoolSet, configs: tuple[StageConfig, ...], top_n: int | None = None
                           ) -> dict[str, np.ndarray]:
    """Every metric under every configuration: ``{metric: (n_configs, n_cases)}``."""
    cache: dict[tuple, tuple] = {}
    rows: dict[str, list[np.ndarray]] = {m: [] for m in METRIC_NAMES}
    for config in configs:
        key = (config.first, config.complete)
        if key not in cache:
            cache[key] = _first_stage(pools, config)
        order = stage_order(pools, config, top_n, _first=cache[key])
        values = batch_metrics(np.take_along_axis(pools.gains, order, axis=1), pools.ideal_gains, pools.k)
        for m in METRIC_NAMES:
            rows[m].append(values[m])
    return {m: np.stack(v) for m, v in rows.items()}


def tune_split(conn: sa.Connection, dataset: str, train_dataset: str | None, pool_strategy: str,
               metric: str = "ndcg_at_k", folds: int = 5, seed: int = 0, *, knowledge_base: str | None = None,
               version: str | None = None, n_resamples: int = 10000, top: int = 10) -> tuple[StageTuning, Strategy]:
    """Choose a stage configuration on ``train_dataset`` (default: ``dataset`` itself) and report it on
    ``dataset``: the result (with the ``top`` best configurations on train) and the chosen strategy. Raises
    :class:`TuneError` when a run is missing or the two runs used other parameters."""
    if metric not in METRIC_NAMES:
        raise ValueError(f"unknown metric {metric!r}; expected one of {list(METRIC_NAMES)}")
    notes: list[str] = []
    train_run = find_pool_run(conn, train_dataset or dataset, pool_strategy, knowledge_base)
    test_run = None
    if train_dataset is not None and train_dataset != dataset:
        test_run = find_pool_run(conn, dataset, pool_strategy, knowledge_base)
        if test_run.strategy.params_hash() != train_run.strategy.params_hash():
            raise TuneError(f"the runs of {pool_strategy} on {train_dataset!r} (run {train_run.run_id}) and on "
                            f"{dataset!r} (run {test_run.run_id}) used different parameters; evaluate both with "
                            "the same strategy version")
        if test_run.knowledge_base != train_run.knowledge_base:
            raise TuneError(f"{train_dataset!r} is evaluated on knowledge base {train_run.knowledge_base!r} and "
                            f"{dataset!r} on {test_run.knowledge_base!r}: tune and report on one knowledge base")
        if test_run.dataset_version == train_run.dataset_version:
            notes.append("the train and test datasets are the same cases: the test number is tuned on them, "
                         "not an estimate")
            test_run = None
    elif train_dataset is not None:
        notes.append("--train-dataset equals --dataset: tuned and reported on the same cases, not an estimate")
    notes += train_run.notes
    train_pools = load_pools(conn, train_run.run_id)
    if not 2 <= folds <= train_pools.n_cases:
        raise ValueError(f"--folds must be between 2 and the number of cases ({train_pools.n_cases}), got {folds}")
    base = train_run.strategy
    top_n = base.rerank.top_n if base.rerank is not None else None
    configs = stage_grid(base, train_pools)
    per_case = evaluate_stage_configs(train_pools, configs, top_n)
    means = per_case[metric].mean(axis=1)
    best = int(np.argmax(means))
    cv = cross_validate_sweep(SweepResult(metric, configs, per_case, train_pools.case_ids), metric, folds, seed,
                              n_resamples=n_resamples)
    chosen, own = configs[best], configs.index(StageConfig.from_strategy(base))
    train_chosen, train_own = per_case[metric][best], per_case[metric][own]
    test = None
    if test_run is not None:
        test_pools = load_pools(conn, test_run.run_id)
        shared = set(map(str, test_pools.case_ids)) & set(map(str, train_pools.case_ids))
        if shared:
            notes.append(f"{len(shared)} case id(s) of {dataset!r} are also in {train_dataset!r}: check the split")
        values = evaluate_stage_configs(test_pools, (chosen, configs[own]), top_n)[metric]
        chosen_mean, own_mean = float(values[0].mean()), float(values[1].mean())
        test = SplitTest(dataset=test_run.dataset, dataset_version=test_run.dataset_version, run_id=test_run.run_id,
                         cases=int(values[0].size), chosen_mean=chosen_mean, own_mean=own_mean,
                         gain=chosen_mean - own_mean, gain_ci=list(bootstrap_ci(values[0] - values[1], n_resamples,
                                                                                seed=seed)),
                         p_value=paired_permutation_test(values[0], values[1], n_resamples, seed=seed))
    where = f"chosen on {train_run.dataset} ({train_pools.n_cases} cases)"
    description = (f"{chosen.label}, {where} from the pools of {base.version}: {metric} {means[best]:.4f} there"
                   + (f", {test.chosen_mean:.4f} on {test.dataset}" if test else "") + ".")
    strategy = chosen.apply_to(base, version or f"{base.version}-tuned-{metric}", description)
    if chosen == configs[own]:
        notes.append(f"the best configuration on {train_run.dataset} is {base.version}'s own: the new version "
                     "only renames it")
    ranked = [RankedStage(rank=r + 1, label=configs[i].label, train_mean=float(means[i]),
                          is_own=configs[i] == configs[own], is_chosen=configs[i] == chosen)
              for r, i in enumerate(sorted(range(len(configs)), key=lambda i: (-means[i], i))[:top])]
    train = SplitTrain(dataset=train_run.dataset, dataset_version=train_run.dataset_version, run_id=train_run.run_id,
                       cases=int(train_chosen.size), in_sample_mean=float(train_chosen.mean()),
                       own_mean=float(train_own.mean()), cv_mean=cv.mean, cv_ci=list(cv.ci),
                       fold_choices=[c.label for c in cv.chosen])
    return StageTuning(
        metric=metric, pool_strategy=base.version, configurations=len(configs), chosen=chosen.label,
        recommended_version=strategy.version, train=train, estimate=test.chosen_mean if test else cv.mean,
        estimate_source=("held-out test dataset" if test else
                         "cross-validation on the tuning dataset (the in-sample mean is not an estimate)"),
        test=test, top_configurations=ranked, strategy=strategy_entry(strategy), yaml=strategy_to_yaml(strategy),
        notes=notes), strategy
