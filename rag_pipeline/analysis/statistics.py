"""Paired statistics of two strategies on the same cases (``a``, ``b`` in case order; differences ``a - b``):
scipy's permutation test and bootstrap in batches of :data:`BATCH_ELEMENTS`, deterministic for a ``seed``."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

BATCH_ELEMENTS = 1 << 21


def _vector(values: ArrayLike, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite")
    return array


def _paired(a: ArrayLike, b: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    left, right = _vector(a, "a"), _vector(b, "b")
    if left.shape != right.shape:
        raise ValueError(f"a and b differ in length: {left.size} != {right.size}")
    return left, right


def _resampling_options(n: int, seed: int) -> dict[str, Any]:
    """Shared keyword arguments: vectorised statistic, bounded batches, seeded generator."""
    return {"vectorized": True, "batch": max(1, BATCH_ELEMENTS // n),
            "rng": np.random.default_rng(seed)}  # scipy >= 1.15 (pyproject.toml)


def _abs_mean(diff: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.abs(np.mean(diff, axis=axis))


def paired_permutation_test(a: ArrayLike, b: ArrayLike, n_resamples: int = 10000, seed: int = 0) -> float:
    """Two-sided sign-flip permutation test of ``mean(a - b)``: the share of sign assignments whose ``|mean|`` reaches
    the observed one (within a relative 100 eps), ``scipy.stats.permutation_test`` (``permutation_type="samples"``,
    ``alternative="greater"``). Exact when ``2**n <= n_resamples``, else ``(hits + 1) / (n_resamples + 1)``; one
    pair: 1.0 (its two sign assignments both reach the observed ``|d|``)."""
    from scipy import stats as scipy_stats  # noqa: PLC0415 - scipy.stats (about 1 s of imports) only when used

    left, right = _paired(a, b)
    diff = left - right
    if diff.size == 1:  # both sign assignments give |d|: the exact p-value is 1 (scipy needs two observations)
        return 1.0
    result = scipy_stats.permutation_test(
        (diff,), _abs_mean, permutation_type="samples", n_resamples=n_resamples,
        alternative="greater", **_resampling_options(diff.size, seed))
    return float(result.pvalue)


def bootstrap_ci(diff: ArrayLike, n_resamples: int = 10000, confidence: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of ``mean(diff)`` (``scipy.stats.bootstrap``, cases resampled with
    replacement). A single case (which scipy rejects) gives the degenerate interval ``(d, d)``."""
    from scipy import stats as scipy_stats  # noqa: PLC0415 - scipy.stats (about 1 s of imports) only when used

    values = _vector(diff, "diff")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples!r}")
    if values.size == 1:
        return float(values[0]), float(values[0])
    interval = scipy_stats.bootstrap(
        (values,), np.mean, n_resamples=n_resamples, confidence_level=confidence,
        method="percentile", **_resampling_options(values.size, seed)).confidence_interval
    return float(interval.low), float(interval.high)


def holm_correction(p_values: ArrayLike) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values, in the input order: sorted ascending, the i-th (0-based) of m scaled by
    ``m - i``, a running maximum keeping them monotone, capped at 1."""
    p = np.asarray(p_values, dtype=float)
    if p.ndim != 1:
        raise ValueError(f"p_values must be 1-D, got shape {p.shape}")
    if np.any(~np.isfinite(p) | (p < 0) | (p > 1)):
        raise ValueError("p_values must lie in [0, 1]")
    ranking = np.argsort(p, kind="stable")
    scaled = (p.size - np.arange(p.size)) * p[ranking]
    adjusted = np.empty_like(p)
    adjusted[ranking] = np.minimum(np.maximum.accumulate(scaled), 1.0)
    return adjusted


def win_tie_loss(a: ArrayLike, b: ArrayLike, tol: float = 1e-12) -> tuple[int, int, int]:
    """Cases where A beats B (``a - b > tol``), ties (``|a - b| <= tol``) and losses."""
    left, right = _paired(a, b)
    diff = left - right
    wins = int(np.count_nonzero(diff > tol))
    losses = int(np.count_nonzero(diff < -tol))
    return wins, diff.size - wins - losses, losses


def paired_ttest(a: ArrayLike, b: ArrayLike, tol: float = 1e-12) -> tuple[float, float]:
    """Two-sided paired t-test ``(t statistic, p-value)`` via ``scipy.stats.ttest_rel``; both NaN when n < 2 or all
    differences agree within ``tol`` (float noise, where scipy would report a meaningless t of ~1e16)."""
    from scipy import stats as scipy_stats  # noqa: PLC0415 - scipy.stats (about 1 s of imports) only when used

    left, right = _paired(a, b)
    if left.size < 2 or np.ptp(left - right) <= tol:
        return float("nan"), float("nan")
    result = scipy_stats.ttest_rel(left, right)
    return float(result.statistic), float(result.pvalue)
