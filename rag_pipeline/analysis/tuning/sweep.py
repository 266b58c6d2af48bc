"""Fusion tuning from stored candidate pools (:class:`~rag_pipeline.evaluation.pools.PoolSet`): grid sweep,
k-fold cross-validation, recommendation (docs/strategies.md). Ties go to the earlier configuration in grid order."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from rag_pipeline.analysis.statistics import bootstrap_ci, paired_permutation_test
from rag_pipeline.contracts.metrics import METRIC_NAMES
from rag_pipeline.evaluation.pools import PoolSet, evaluate_configs, evaluate_fusion, recall_ceiling
from rag_pipeline.retrieval.fusion import NORMALIZATIONS
from rag_pipeline.retrieval.strategies import Strategy, StrategyError, strategy_to_yaml

if TYPE_CHECKING:
    from rag_pipeline.analysis.tuning.stages import StageConfig

DEFAULT_METRIC = "ndcg_at_k"
WEIGHT_STEPS = 20  # vector weight i / 20, i = 0..20 (step 0.05)
RRF_KS = (1, 5, 10, 20, 40, 60, 80)


@dataclass(frozen=True)
class FusionConfig:
    """The fusion parameters of a :class:`Strategy` (usable wherever ``fuse_batch`` wants one)."""

    fusion: str = "weighted"
    normalization: str = "none"
    vector_weight: float = 0.5
    keyword_weight: float = 0.5
    rrf_k: int = 60

    @classmethod
    def from_strategy(cls, strategy: Any) -> FusionConfig:
        """The fusion parameters of ``strategy`` (any object with the five attributes)."""
        return cls(strategy.fusion, strategy.normalization, float(strategy.vector_weight),
                   float(strategy.keyword_weight), int(strategy.rrf_k))

    @property
    def label(self) -> str:
        """Short human-readable name, e.g. ``weighted minmax 0.30/0.70`` or ``rrf k=60``."""
        if self.fusion == "rrf":
            weights = "" if self.vector_weight == self.keyword_weight == 1.0 else \
                f" {self.vector_weight:.2f}/{self.keyword_weight:.2f}"
            return f"rrf k={self.rrf_k}{weights}"
        single = {(1.0, 0.0): " (vector only)", (0.0, 1.0): " (keyword only)"}
        suffix = single.get((self.vector_weight, self.keyword_weight), "") \
            if self.normalization == "none" else ""
        weights = f"{self.vector_weight:.2f}/{self.keyword_weight:.2f}"
        return f"weighted {self.normalization} {weights}{suffix}"

    def apply_to(self, strategy: Strategy, version: str, description: str = "") -> Strategy:
        """``strategy`` with this fusion, a new version and description (all else unchanged)."""
        changes: dict[str, Any] = {"fusion": self.fusion, "normalization": self.normalization,
                                   "vector_weight": self.vector_weight, "keyword_weight": self.keyword_weight}
        if self.fusion == "rrf":
            changes["rrf_k"] = self.rrf_k
        return strategy.replace(version=version, description=description, **changes)


def grid(steps: int = WEIGHT_STEPS, rrf_ks: tuple[int, ...] = RRF_KS) -> tuple[FusionConfig, ...]:
    """Weighted fusion per normalisation x vector weight ``i / steps``, then RRF per k."""
    weighted = [FusionConfig("weighted", norm, i / steps, (steps - i) / steps)
                for norm in NORMALIZATIONS for i in range(steps + 1)]
    return tuple(weighted + [FusionConfig("rrf", "none", 1.0, 1.0, k) for k in rrf_ks])


def _check_metric(metric: str) -> None:
    if metric not in METRIC_NAMES:
        raise ValueError(f"unknown metric {metric!r}; expected one of {list(METRIC_NAMES)}")


Config = TypeVar("Config", "FusionConfig", "StageConfig")
"""What a sweep varies: the fusion (:func:`sweep`) or the optional stages (:mod:`.stages`)."""


@dataclass(frozen=True, eq=False)
class SweepResult(Generic[Config]):
    """Every configuration's per-case metrics; ``per_case[name]`` is ``(n_configs, n_cases)``."""

    metric: str
    configs: tuple[Config, ...]
    per_case: dict[str, np.ndarray]
    case_ids: np.ndarray

    @property
    def means(self) -> np.ndarray:
        """Mean of :attr:`metric` over all cases, per configuration."""
        return self.per_case[self.metric].mean(axis=1)

    @property
    def best_index(self) -> int:
        """Index of the configuration with the best mean (first on ties)."""
        return int(np.argmax(self.means))

    @property
    def best_config(self) -> Config:
        """The configuration with the best mean on all cases."""
        return self.configs[self.best_index]

    def rows(self) -> list[dict[str, Any]]:
        """One JSON-able dict per configuration: parameters, label and mean of every metric."""
        means = {name: values.mean(axis=1) for name, values in self.per_case.items()}
        return [{**dataclasses.asdict(c), "label": c.label,
                 **{name: float(means[name][i]) for name in means}} for i, c in enumerate(self.configs)]


def sweep(pools: PoolSet, metric: str = DEFAULT_METRIC,
          configs: tuple[FusionConfig, ...] | None = None) -> SweepResult[FusionConfig]:
    """Evaluate every configuration (default :func:`grid`) on all cases."""
    _check_metric(metric)
    configs = grid() if configs is None else tuple(configs)
    if not configs:
        raise ValueError("no configurations to sweep")
    results = evaluate_configs(pools, configs)
    per_case = {name: np.stack([r[name] for r in results]) for name in METRIC_NAMES}
    return SweepResult(metric, configs, per_case, pools.case_ids)


def assign_folds(n_cases: int, folds: int = 5, seed: int = 0) -> np.ndarray:
    """Fold (0..folds-1) per case: a seeded shuffle dealt round-robin (sizes differ by <= 1)."""
    if not 2 <= folds <= n_cases:
        raise ValueError(f"folds must be in [2, n_cases={n_cases}], got {folds}")
    fold_of = np.empty(n_cases, dtype=np.int64)
    fold_of[np.random.default_rng(seed).permutation(n_cases)] = np.arange(n_cases) % folds
    return fold_of


@dataclass(frozen=True, eq=False)
class CVResult(Generic[Config]):
    """Out-of-fold estimate of the tuned metric; ``chosen[f]`` was picked without fold ``f``."""

    metric: str
    fold_of: np.ndarray
    chosen: tuple[Config, ...]
    out_of_fold: np.ndarray
    mean: float
    ci: tuple[float, float]
    recommended: Config
    in_sample_mean: float


def cross_validate(pools: PoolSet, metric: str = DEFAULT_METRIC, folds: int = 5, seed: int = 0,
                   *, configs: tuple[FusionConfig, ...] | None = None,
                   fold_of: np.ndarray | None = None, sweep_result: SweepResult[FusionConfig] | None = None,
                   n_resamples: int = 10000) -> CVResult[FusionConfig]:
    """k-fold cross-validation of "pick the best configuration" over cases: each fold scores the configuration best on
    the other folds (``fold_of`` overrides :func:`assign_folds`; ``sweep_result`` reuses a sweep of the same pools).
    CI: percentile bootstrap 95% on the out-of-fold mean; ``recommended``: the best on all cases, ``in_sample_mean``."""
    result = sweep_result if sweep_result is not None else sweep(pools, metric, configs)
    return cross_validate_sweep(result, metric, folds, seed, fold_of=fold_of, n_resamples=n_resamples)


def cross_validate_sweep(result: SweepResult[Config], metric: str = DEFAULT_METRIC, folds: int = 5, seed: int = 0,
                         *, fold_of: np.ndarray | None = None, n_resamples: int = 10000) -> CVResult[Config]:
    """:func:`cross_validate` of the configurations of a sweep already made (fusion or stage configurations)."""
    _check_metric(metric)
    values = result.per_case[metric]
    fold_of = assign_folds(values.shape[1], folds, seed) if fold_of is None else np.asarray(fold_of)
    if fold_of.shape != (values.shape[1],):
        raise ValueError(f"fold_of needs one fold per case ({values.shape[1]})")
    out_of_fold = np.empty(values.shape[1])
    chosen = []
    for fold in np.unique(fold_of):
        held_out = fold_of == fold
        if held_out.all():
            raise ValueError("cross-validation needs at least two non-empty folds")
        best = int(np.argmax(values[:, ~held_out].mean(axis=1)))
        chosen.append(result.configs[best])
        out_of_fold[held_out] = values[best, held_out]
    overall = values.mean(axis=1)
    ci = bootstrap_ci(out_of_fold, n_resamples, seed=seed)
    return CVResult(metric, fold_of, tuple(chosen), out_of_fold, float(out_of_fold.mean()), ci,
                    result.configs[int(np.argmax(overall))], float(overall.max()))


@dataclass(frozen=True, eq=False)
class Recommendation:
    """The tuned strategy and the evidence for it (see :func:`recommend`)."""

    metric: str
    base: Strategy
    strategy: Strategy
    yaml: str
    predicted_mean: float
    cv: CVResult[FusionConfig]
    base_mean: float
    gain: float
    gain_ci: tuple[float, float]
    p_value: float
    recall_ceiling: float
    sweep: SweepResult[FusionConfig]

    def summary(self) -> dict[str, Any]:
        """JSON-able key numbers (for Dagster metadata / CLI output)."""
        cv, names = self.cv, ("metric", "predicted_mean", "base_mean", "gain", "p_value", "recall_ceiling")
        return {**{name: getattr(self, name) for name in names},
                "base_version": self.base.version, "recommended_version": self.strategy.version,
                "recommended": FusionConfig.from_strategy(self.strategy).label,
                "cv_mean": cv.mean, "cv_ci": list(cv.ci), "gain_ci": list(self.gain_ci),
                "fold_choices": [c.label for c in cv.chosen], "cases": int(cv.fold_of.size),
                "configurations": len(self.sweep.configs)}


def expressible_configs(base: Strategy, configs: tuple[FusionConfig, ...] | None = None) -> tuple[FusionConfig, ...]:
    """The configurations that make a valid strategy with ``base``'s other parameters
    (e.g. all weight on a leg whose candidate k is 0 is not)."""
    def valid(config: FusionConfig) -> bool:
        try:
            config.apply_to(base, base.version)
        except StrategyError:
            return False
        return True

    return tuple(c for c in (grid() if configs is None else configs) if valid(c))


def recommend(pools: PoolSet, base_strategy: Strategy, metric: str = DEFAULT_METRIC,
              folds: int = 5, seed: int = 0, *, version: str | None = None,
              configs: tuple[FusionConfig, ...] | None = None, n_resamples: int = 10000) -> Recommendation:
    """Sweep, cross-validate and emit a ready-to-paste strategy (default version ``<base>-tuned-<metric>``) tuned on
    ``pools``, which ``base_strategy`` stored (its candidate ks are kept). The gain compares the out-of-fold per-case
    metric with the base's own fusion on the same pools (mean, paired bootstrap 95% CI, sign-flip p);
    ``predicted_mean`` is the recommended configuration's mean on all cases, what a real run reproduces."""
    _check_metric(metric)
    if pools.strategy_version is not None and pools.strategy_version != base_strategy.version:
        raise ValueError(f"pools were stored by {pools.strategy_version!r}, not by the base "
                         f"strategy {base_strategy.version!r}; tune the strategy that stored them")
    candidates = expressible_configs(base_strategy, configs)
    result = sweep(pools, metric, candidates)
    cv = cross_validate(pools, metric, folds, seed, sweep_result=result, n_resamples=n_resamples)
    base_values = evaluate_fusion(pools, base_strategy)[metric]
    diff = cv.out_of_fold - base_values
    lo, hi = cv.ci
    description = (f"Fusion tuned on the pools of {base_strategy.version} ({pools.n_cases} cases): "
                   f"{cv.recommended.label}; {len(cv.chosen)}-fold CV {metric} {cv.mean:.4f} "
                   f"[{lo:.4f}, {hi:.4f}], base fusion {float(base_values.mean()):.4f}.")
    strategy = cv.recommended.apply_to(base_strategy, version or f"{base_strategy.version}-tuned-{metric}", description)
    return Recommendation(
        metric=metric, base=base_strategy, strategy=strategy, yaml=strategy_to_yaml(strategy),
        predicted_mean=cv.in_sample_mean, cv=cv, base_mean=float(base_values.mean()),
        gain=float(diff.mean()), gain_ci=bootstrap_ci(diff, n_resamples, seed=seed),
        p_value=paired_permutation_test(cv.out_of_fold, base_values, n_resamples, seed=seed),
        recall_ceiling=recall_ceiling(pools), sweep=result)
