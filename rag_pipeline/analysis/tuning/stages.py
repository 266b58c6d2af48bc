"""Re-fusing stored pools through the optional stages: complete pools and the rerank stage, offline.

A run of a strategy with ``complete_pool: true`` stores every pooled chunk's score from both legs (a completed
score has no leg rank), and a run with a rerank stage stores ``rerank_score``. From those pools any
:class:`StageConfig` can be re-applied without SQL: the first-stage fusion (weights, normalisation), with or
without completion (without: the completed scores are dropped, which is exactly what a run without
``complete_pool`` sees), then the rerank mix ``weight · norm(rerank) + (1 − weight) · norm(first stage)``.
The order is the online one (:mod:`rag_pipeline.retrieval.stages`): first stage ``final desc, vector desc,
chunk id``; rerank ``final desc, first-stage rank asc``; candidates below ``top_n`` after, in first-stage
order. Re-applying the pool strategy's own configuration reproduces its run's ranking (a test checks it).

With ``rerank.top_n`` set only the stored top_n has a rerank score, so the first stage (and completion) stay
the stored ones and only the rerank weight and normalisation are swept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rag_pipeline.analysis.tuning.sweep import FusionConfig
from rag_pipeline.evaluation.metrics import METRIC_NAMES, batch_metrics
from rag_pipeline.evaluation.pools import PoolSet
from rag_pipeline.retrieval.fusion import fuse_batch, normalize_batch, order_batch
from rag_pipeline.retrieval.strategies import Strategy, StrategyError

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
    out, seen = [], set()
    for config in configs:
        if config in seen:
            continue
        seen.add(config)
        try:
            config.apply_to(base, base.version)
        except StrategyError:
            continue
        out.append(config)
    return tuple(out)


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
