"""Benchmark the fusion sweep + k-fold cross-validation of rag_pipeline.analysis.tuning.sweep.

SYNTHETIC, RANDOM data (not a real dataset; seeded): ``--cases`` cases, each
with a pool of ``--pool`` distinct chunks. Every chunk is in the vector leg
with probability 0.7 and in the keyword leg with probability 0.7 (at least
one); 1-5 relevant chunks per case, 80% of them planted in the pool, the rest
missing from it; relevant chunks get noisy higher scores in both legs. Leg
ranks follow the leg scores; the stored rank / final score come from the
``--base`` strategy's fusion (default ``hybrid-bm25-v1``), as a real run's.

Timed (wall clock, best of ``--repeats``): building the padded pools from
rows (:func:`pools_from_rows`), the full grid sweep, the k-fold CV on the
sweep's per-case matrix, and :func:`recommend` end to end (sweep + CV +
base fusion + bootstrap CIs + permutation test + strategy YAML). Once, as a
reference, :func:`evaluate_fusion` per configuration (plain ``fuse_batch`` +
``order_batch``); the bench fails unless the sweep's per-case values equal it. The last line
is ``configs=<n> cases=<c> pool=<p> sweep_s=<s> cv_s=<s> recommend_s=<s>
configs_per_s=<r>``.

Usage: python bench/tuning_bench.py [--cases 300] [--pool 200] [--folds 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchutil import best_time, machine_line  # bench/ is on sys.path

from rag_pipeline.analysis.tuning.sweep import cross_validate, evaluate_fusion, recommend, sweep
from rag_pipeline.evaluation.pools import pools_from_rows
from rag_pipeline.retrieval.fusion import fuse_batch, order_batch
from rag_pipeline.retrieval.strategies import get_strategy


def _leg_ranks(scores: np.ndarray) -> np.ndarray:
    """1-based rank per row by descending score (slot order breaks ties), NaN where missing."""
    order = np.argsort(np.where(np.isnan(scores), np.inf, -scores), axis=1, kind="stable")
    ranks = np.empty(scores.shape)
    np.put_along_axis(ranks, order, np.arange(1, scores.shape[1] + 1, dtype=float), axis=1)
    return np.where(np.isnan(scores), np.nan, ranks)


def synthetic_rows(n_cases: int, pool: int, seed: int, strategy: Any
                   ) -> tuple[list[dict], list[dict]]:
    """Random candidate rows and case rows (see module doc) ranked by ``strategy``."""
    rng = np.random.default_rng(seed)
    shape = (n_cases, pool)
    ids = np.array([f"{i:08x}-0000-4000-8000-{j:012x}" for i in range(n_cases)
                    for j in rng.permutation(10 * pool)[:pool]], dtype=object).reshape(shape)
    n_rel = rng.integers(1, 6, n_cases)
    planted = rng.binomial(n_rel, 0.8)
    relevant = np.arange(pool) < planted[:, None]  # slots 0..planted-1, shuffled below
    in_vector = rng.random(shape) < 0.7
    in_keyword = (rng.random(shape) < 0.7) | ~in_vector
    vector = np.where(in_vector, rng.normal(0.45, 0.08, shape) + relevant
                      * rng.normal(0.2, 0.1, shape), np.nan)
    keyword = np.where(in_keyword, rng.exponential(2.0, shape) + relevant
                       * rng.exponential(8.0, shape), np.nan)
    shuffle = np.argsort(rng.random(shape), axis=1)
    ids, relevant, vector, keyword = (np.take_along_axis(a, shuffle, 1)
                                      for a in (ids, relevant, vector, keyword))
    vr, kr = _leg_ranks(vector), _leg_ranks(keyword)
    chunk_rank = np.unique(ids.astype(str), return_inverse=True)[1].reshape(shape)
    final = fuse_batch(strategy, vector, keyword, vr, kr)
    ordered = order_batch(final, vector, chunk_rank)
    stored = np.empty(shape, dtype=np.int64)
    np.put_along_axis(stored, ordered, np.arange(1, pool + 1), axis=1)

    def value(a: np.ndarray, i: int, j: int) -> float | None:
        return None if np.isnan(a[i, j]) else float(a[i, j])

    candidates = [
        {"case_id": f"case-{i:05d}", "chunk_id": ids[i, j], "rank": int(stored[i, j]),
         "vector_score": value(vector, i, j), "vector_rank": value(vr, i, j),
         "keyword_score": value(keyword, i, j), "keyword_rank": value(kr, i, j),
         "final_score": float(final[i, j]), "is_relevant": bool(relevant[i, j]),
         "strategy_version": strategy.version}
        for i in range(n_cases) for j in range(pool)]
    cases = [{"case_id": f"case-{i:05d}", "k": 10,
              "relevant_chunk_ids": [str(c) for c in ids[i, relevant[i]]]
              + [f"missing-{i}-{r}" for r in range(n_rel[i] - planted[i])]}
             for i in range(n_cases)]
    return candidates, cases


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the timings."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--pool", type=int, default=200)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--metric", default="ndcg_at_k")
    parser.add_argument("--base", default="hybrid-bm25-v1")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    base = get_strategy(args.base)
    candidates, cases = synthetic_rows(args.cases, args.pool, args.seed, base)
    build_s, pools = best_time(lambda: pools_from_rows(candidates, cases), args.repeats)
    sweep_s, result = best_time(lambda: sweep(pools, args.metric), args.repeats)
    ref_s, reference = best_time(lambda: [evaluate_fusion(pools, c)[args.metric]
                                          for c in result.configs], 1)
    if not np.array_equal(np.stack(reference), result.per_case[args.metric]):
        print("FAIL: sweep differs from evaluate_fusion per configuration", file=sys.stderr)
        return 1
    cv_s, cv = best_time(lambda: cross_validate(pools, args.metric, args.folds, args.seed,
                                                sweep_result=result), args.repeats)
    rec_s, rec = best_time(lambda: recommend(pools, base, args.metric, args.folds, args.seed),
                           args.repeats)
    n = len(result.configs)
    print(f"SYNTHETIC random pools (not a real dataset): cases={pools.n_cases} "
          f"pool={pools.pool_size} candidates={int(pools.mask.sum())} base={base.version} "
          f"metric={args.metric} folds={args.folds} repeats={args.repeats} (best-of)")
    print(machine_line())
    print(f"pools_from_rows          {build_s:8.3f} s")
    print(f"sweep ({n} configs)      {sweep_s:8.3f} s  {n / sweep_s:8.1f} configs/s")
    print(f"reference: evaluate_fusion per config (fuse_batch + order_batch) {ref_s:8.3f} s  "
          f"{n / ref_s:8.1f} configs/s, per-case results identical")
    print(f"{args.folds}-fold CV (on the sweep) {cv_s:8.3f} s")
    print(f"recommend end to end     {rec_s:8.3f} s  (sweep + CV + CIs + permutation test)")
    print(f"best={result.best_config.label} mean={result.means[result.best_index]:.4f} "
          f"cv_mean={cv.mean:.4f} ci=[{cv.ci[0]:.4f}, {cv.ci[1]:.4f}] "
          f"base_mean={rec.base_mean:.4f} gain={rec.gain:+.4f} p={rec.p_value:.4g} "
          f"recall_ceiling={rec.recall_ceiling:.4f}")
    print(f"configs={n} cases={pools.n_cases} pool={pools.pool_size} sweep_s={sweep_s:.4f} "
          f"cv_s={cv_s:.4f} recommend_s={rec_s:.4f} configs_per_s={n / sweep_s:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
