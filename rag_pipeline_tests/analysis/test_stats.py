"""Tests for rag_pipeline.analysis.statistics against scipy (and statsmodels, a dev dependency)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from rag_pipeline.analysis.statistics import (
    bootstrap_ci,
    holm_correction,
    paired_permutation_test,
    paired_ttest,
    win_tie_loss,
)


def _mean_diff(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    return np.mean(x - y, axis=axis)


def _scipy_permutation_p(a: np.ndarray, b: np.ndarray, n_resamples: float) -> float:
    result = scipy_stats.permutation_test((a, b), _mean_diff, permutation_type="samples",
                                          vectorized=True, n_resamples=n_resamples,
                                          alternative="two-sided", rng=np.random.default_rng(0))
    return float(result.pvalue)


def _metric_pair(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.uniform(0, 1, n)
    return a, np.clip(a - rng.normal(0.08, 0.2, n), 0, 1)


@pytest.mark.parametrize("seed, n", [(0, 5), (1, 10), (2, 13), (3, 12)])
def test_permutation_exact_matches_scipy(seed: int, n: int) -> None:
    a, b = _metric_pair(seed, n)
    p = paired_permutation_test(a, b)  # 2**n <= 10000 -> exact enumeration
    assert p == pytest.approx(_scipy_permutation_p(a, b, 10000), abs=1e-12)


def test_permutation_exact_with_tied_metric_values() -> None:
    # Typical per-case metrics (0 / 0.5 / 1): many differences and null sums tie exactly.
    a = np.array([1, 0.5, 1, 0, 1, 1, 0.5, 1, 0, 1, 1])
    b = np.array([0.5, 0.5, 0, 0, 1, 0.5, 0, 1, 0.5, 0, 0.5])
    assert paired_permutation_test(a, b) == pytest.approx(
        _scipy_permutation_p(a, b, 10000), abs=1e-12)


def test_permutation_hand_examples() -> None:
    # d = (1, 1, 1): |sum| = 3 only for all-plus / all-minus -> 2 of 8.
    assert paired_permutation_test([1, 1, 1], [0, 0, 0]) == 0.25
    assert paired_permutation_test([0.3, 0.2], [0.3, 0.2]) == 1.0
    assert paired_permutation_test([0.4, 0.2], [0.2, 0.4]) == 1.0
    # one pair: d and -d have the same |d|, 2 of 2 assignments reach it (scipy refuses a single observation)
    assert paired_permutation_test([0.9], [0.1]) == 1.0


def test_permutation_monte_carlo_close_to_exact() -> None:
    """n = 16 > log2(10000): Monte Carlo with 10000 sign flips vs scipy's exact 2**16.

    The estimate (hits + 1) / (R + 1) has standard error sqrt(p (1 - p) / R)
    <= 0.005 for R = 10000; 4 standard errors plus the +1 bias bound 1 / (R + 1)
    keeps the false-failure rate below 1e-4 (the seed is fixed anyway).
    """
    a, b = _metric_pair(5, 16)
    exact = _scipy_permutation_p(a, b, np.inf)
    assert 0.01 < exact < 0.99  # a non-degenerate p-value
    p = paired_permutation_test(a, b, n_resamples=10000, seed=3)
    tolerance = 4 * np.sqrt(exact * (1 - exact) / 10000) + 1 / 10001
    assert abs(p - exact) <= tolerance
    assert paired_permutation_test(a, b, n_resamples=10000, seed=3) == p


def test_permutation_large_n_strong_effect() -> None:
    a, b = _metric_pair(6, 500)
    assert paired_permutation_test(a, b, n_resamples=2000) == pytest.approx(1 / 2001)


def test_bootstrap_matches_scipy_percentile() -> None:
    """Both are Monte Carlo estimates of the same percentile interval.

    For a mean with standard error se, the 2.5 % quantile of 10000 resampled
    means has Monte Carlo sd ~ sqrt(.025 * .975 / 1e4) / phi(1.96) * se
    ~ 0.027 se; the difference of two independent runs ~ 0.038 se. A
    tolerance of 0.25 se is over 6 such standard deviations.
    """
    rng = np.random.default_rng(11)
    diff = rng.normal(0.05, 0.3, 200)
    low, high = bootstrap_ci(diff, n_resamples=10000, confidence=0.95, seed=1)
    ref = scipy_stats.bootstrap((diff,), np.mean, method="percentile", n_resamples=10000,
                                confidence_level=0.95, rng=np.random.default_rng(2))
    se = diff.std(ddof=1) / np.sqrt(diff.size)
    assert low == pytest.approx(ref.confidence_interval.low, abs=0.25 * se)
    assert high == pytest.approx(ref.confidence_interval.high, abs=0.25 * se)
    assert low < diff.mean() < high
    assert bootstrap_ci(diff, n_resamples=10000, seed=1) == (low, high)


def test_bootstrap_degenerate_and_invalid() -> None:
    assert bootstrap_ci([0.25, 0.25, 0.25]) == (0.25, 0.25)
    assert bootstrap_ci([0.5]) == (0.5, 0.5)
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci([0.1, 0.2], confidence=1.0)
    with pytest.raises(ValueError, match="finite"):
        bootstrap_ci([0.1, np.nan])


def test_holm_hand_example() -> None:
    # sorted: .005*4=.02, .01*3=.03, .03*2=.06, .04*1=.04 -> running max .06
    adjusted = holm_correction([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(adjusted, [0.03, 0.06, 0.06, 0.02], rtol=1e-15)
    np.testing.assert_array_equal(holm_correction([0.5, 0.6]), [1.0, 1.0])
    assert holm_correction([]).size == 0
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm_correction([0.1, 1.5])


def test_holm_matches_statsmodels() -> None:
    from statsmodels.stats import multitest

    p = np.random.default_rng(4).uniform(0, 0.2, 25)
    expected = multitest.multipletests(p, method="holm")[1]
    np.testing.assert_allclose(holm_correction(p), expected, rtol=1e-12)


def test_win_tie_loss() -> None:
    a = [1.0, 0.5, 0.3, 0.2 + 0.1, 0.0]
    b = [0.5, 0.5, 0.1 + 0.2, 0.3, 1.0]
    assert win_tie_loss(a, b) == (1, 3, 1)
    assert win_tie_loss(a, b, tol=0.6) == (0, 4, 1)
    with pytest.raises(ValueError, match="length"):
        win_tie_loss([1.0], [1.0, 2.0])


def test_paired_ttest_matches_scipy() -> None:
    a, b = _metric_pair(8, 40)
    reference = scipy_stats.ttest_rel(a, b)
    t, p = paired_ttest(a, b)
    assert t == pytest.approx(reference.statistic, rel=1e-12)
    assert p == pytest.approx(reference.pvalue, rel=1e-12)
    assert all(np.isnan(paired_ttest([0.2, 0.3], [0.1, 0.2])))
