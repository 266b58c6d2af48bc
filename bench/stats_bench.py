"""What the scipy wrappers of :mod:`rag_pipeline.analysis.statistics` cost, at several dataset sizes.

Baseline, measured in the same run: the plain numpy sign-flip test and percentile bootstrap that
``statistics.py`` held before it delegated to ``scipy.stats.permutation_test`` / ``scipy.stats.bootstrap``
(kept here, and only here, as the yardstick). For each size it prints the seconds of both, the ratio
``scipy / numpy`` and how far the two p-values / CIs are apart (Monte-Carlo noise only: same rule, other
random draws), then the cost of one whole ``compare`` (4 metrics x 7 strategies vs a baseline).

    python bench/stats_bench.py --sizes 100,1000,3000,10000 --resamples 10000
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import scipy.stats  # noqa: F401 - imported here, lazily by statistics.py: a one-time cost, not the per-call one timed
from benchutil import best_time, machine_line  # bench/ is on sys.path

from rag_pipeline.analysis import statistics
from rag_pipeline.analysis.comparison import StrategyRun, compare
from rag_pipeline.evaluation.metrics import METRIC_NAMES

_TIE_RTOL = 100 * np.finfo(float).eps


def numpy_sign_flip_baseline(diff: np.ndarray, n_resamples: int, seed: int = 0) -> float:
    """The previous hand-written test: random sign flips, ``(hits + 1) / (n_resamples + 1)``."""
    n = diff.size
    observed = abs(diff.sum())
    threshold = observed - _TIE_RTOL * observed
    rng = np.random.default_rng(seed)
    rows = max(1, (1 << 21) // n)
    hits = 0
    for start in range(0, n_resamples, rows):
        flips = rng.integers(0, 2, size=(min(rows, n_resamples - start), n))
        hits += np.count_nonzero(np.abs((1.0 - 2.0 * flips) @ diff) >= threshold)
    return (hits + 1) / (n_resamples + 1)


def numpy_bootstrap_baseline(diff: np.ndarray, n_resamples: int, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    rows = max(1, (1 << 21) // diff.size)
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, rows):
        stop = min(start + rows, n_resamples)
        means[start:stop] = diff[rng.integers(0, diff.size, size=(stop - start, diff.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


@contextlib.contextmanager
def numpy_baselines():
    """``compare`` with the numpy baselines in place of the scipy wrappers (same-run yardstick)."""
    saved = statistics.paired_permutation_test, statistics.bootstrap_ci
    statistics.paired_permutation_test = lambda a, b, n_resamples=10000, seed=0: numpy_sign_flip_baseline(
        np.asarray(a, float) - np.asarray(b, float), n_resamples, seed)
    statistics.bootstrap_ci = lambda diff, n_resamples=10000, seed=0: numpy_bootstrap_baseline(
        np.asarray(diff, float), n_resamples, seed)
    try:
        yield
    finally:
        statistics.paired_permutation_test, statistics.bootstrap_ci = saved


def paired_metrics(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two strategies' per-case nDCG-like values with a small real difference (p neither 0 nor 1)."""
    rng = np.random.default_rng(seed)
    a = rng.beta(2, 2, n)
    b = np.clip(a + rng.normal(0.01, 0.2, n), 0, 1)
    return a, b


def strategy_runs(n: int, strategies: int = 8) -> list[StrategyRun]:
    """``strategies`` synthetic runs over the same ``n`` cases (the first is the baseline ``hybrid-v1``)."""
    rng = np.random.default_rng(7)
    runs = []
    for s in range(strategies):
        values = np.clip(rng.beta(2, 2, (n, len(METRIC_NAMES))) + 0.01 * s, 0, 1)
        per_case = {f"case-{i:05d}": dict(zip(METRIC_NAMES, map(float, row), strict=True))
                    for i, row in enumerate(values)}
        runs.append(StrategyRun("hybrid-v1" if s == 0 else f"strategy-{s}", f"run-{s}", per_case, knowledge_base="kb"))
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,3000,10000", help="cases per comparison, comma-separated")
    parser.add_argument("--resamples", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--compare-size", type=int, default=1000, help="cases of the whole-compare timing (0: skip)")
    args = parser.parse_args(argv)
    print(machine_line())
    print(f"{'cases':>6}  {'perm scipy s':>12}  {'perm numpy s':>12}  {'ratio':>6}  {'|dp|':>7}  "
          f"{'boot scipy s':>12}  {'boot numpy s':>12}  {'ratio':>6}  {'|dCI|':>7}")
    for n in (int(x) for x in args.sizes.split(",")):
        a, b = paired_metrics(n, seed=n)
        diff = a - b
        perm = functools.partial(statistics.paired_permutation_test, a, b, args.resamples)
        t_perm, p_scipy = best_time(perm, args.repeats)
        t_perm0, p_numpy = best_time(functools.partial(numpy_sign_flip_baseline, diff, args.resamples), args.repeats)
        t_boot, ci_scipy = best_time(functools.partial(statistics.bootstrap_ci, diff, args.resamples), args.repeats)
        t_boot0, ci_numpy = best_time(functools.partial(numpy_bootstrap_baseline, diff, args.resamples), args.repeats)
        ci_gap = max(abs(x - y) for x, y in zip(ci_scipy, ci_numpy, strict=True))
        print(f"{n:>6}  {t_perm:>12.4f}  {t_perm0:>12.4f}  {t_perm / t_perm0:>6.2f}  {abs(p_scipy - p_numpy):>7.4f}  "
              f"{t_boot:>12.4f}  {t_boot0:>12.4f}  {t_boot / t_boot0:>6.2f}  {ci_gap:>7.4f}")
        print(f"ratio_scipy_vs_numpy_permutation_{n}={t_perm / t_perm0:.3f} p_scipy={p_scipy:.4f} "
              f"p_numpy={p_numpy:.4f}")
    if args.compare_size:
        runs = strategy_runs(args.compare_size)
        t_compare, comp = best_time(lambda: compare(runs, "hybrid-v1", n_resamples=args.resamples), 1)
        with numpy_baselines():
            t_compare0, _ = best_time(lambda: compare(runs, "hybrid-v1", n_resamples=args.resamples), 1)
        print(f"compare: {len(runs)} strategies x {len(comp.metrics)} metrics x {args.compare_size} cases, "
              f"{args.resamples} resamples: {t_compare:.2f} s (numpy baseline {t_compare0:.2f} s, "
              f"ratio {t_compare / t_compare0:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
