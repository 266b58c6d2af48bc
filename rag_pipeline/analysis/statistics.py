"""Paired statistics for comparing two strategies on the same evaluation cases.

Inputs are per-case metric values ``a`` (strategy A) and ``b`` (strategy B)
in the same case order; differences are ``a - b``. Resampling is vectorised
(the resample matrix is built in chunks of about :data:`CHUNK_ELEMENTS`
numbers) and deterministic for a given ``seed``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as scipy_stats

CHUNK_ELEMENTS = 1 << 21
# Relative tolerance for null statistics that equal the observed one in exact
# arithmetic; the same value scipy.stats.permutation_test uses.
_TIE_RTOL = 100 * np.finfo(float).eps


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


def _chunks(total: int, width: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` row ranges covering ``total`` rows of ``width`` numbers each."""
    rows = max(1, CHUNK_ELEMENTS // max(width, 1))
    for start in range(0, total, rows):
        yield start, min(start + rows, total)


def paired_permutation_test(a: ArrayLike, b: ArrayLike, n_resamples: int = 10000,
                            seed: int = 0) -> float:
    """Two-sided sign-flip permutation test of the mean difference ``mean(a - b)``.

    Under H0 each difference's sign is exchangeable. The p-value is the share
    of sign assignments whose ``|mean|`` reaches the observed ``|mean|``
    (within a relative 100 eps). Exact enumeration of all ``2**n`` assignments
    when ``2**n <= n_resamples`` (the rule of ``scipy.stats.permutation_test``);
    otherwise ``n_resamples`` random assignments and ``(hits + 1) / (n_resamples + 1)``,
    which is never 0 and is a valid p-value.
    """
    left, right = _paired(a, b)
    diff = left - right
    n = diff.size
    observed = abs(diff.sum())
    threshold = observed - _TIE_RTOL * observed
    hits = 0
    if 2**n <= n_resamples:
        bits = np.arange(n)
        for start, stop in _chunks(2**n, n):
            flips = (np.arange(start, stop)[:, None] >> bits) & 1
            hits += np.count_nonzero(np.abs((1.0 - 2.0 * flips) @ diff) >= threshold)
        return hits / 2**n
    rng = np.random.default_rng(seed)
    for start, stop in _chunks(n_resamples, n):
        flips = rng.integers(0, 2, size=(stop - start, n))
        hits += np.count_nonzero(np.abs((1.0 - 2.0 * flips) @ diff) >= threshold)
    return (hits + 1) / (n_resamples + 1)


def bootstrap_ci(diff: ArrayLike, n_resamples: int = 10000, confidence: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of ``mean(diff)``.

    Resamples cases with replacement ``n_resamples`` times and returns the
    ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles (linear
    interpolation) of the resampled means, as ``scipy.stats.bootstrap(...,
    method="percentile")`` does.
    """
    values = _vector(diff, "diff")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples!r}")
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    for start, stop in _chunks(n_resamples, values.size):
        picks = rng.integers(0, values.size, size=(stop - start, values.size))
        means[start:stop] = values[picks].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(means, [100.0 * alpha, 100.0 * (1.0 - alpha)])
    return float(low), float(high)


def holm_correction(p_values: ArrayLike) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values, in the input order.

    Sorted ascending, the i-th (0-based) of m p-values is scaled by ``m - i``;
    a running maximum keeps the adjusted values monotone, capped at 1.
    """
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
    """Two-sided paired t-test ``(t statistic, p-value)`` via ``scipy.stats.ttest_rel``.

    Both are NaN when n < 2 or all differences agree within ``tol`` (zero
    variance up to float noise, e.g. 0.2 - 0.1 vs 0.3 - 0.2, where scipy
    would report a meaningless t of ~1e16).
    """
    left, right = _paired(a, b)
    if left.size < 2 or np.ptp(left - right) <= tol:
        return float("nan"), float("nan")
    result = scipy_stats.ttest_rel(left, right)
    return float(result.statistic), float(result.pvalue)
