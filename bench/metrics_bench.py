"""Benchmark rag_pipeline.evaluation.metrics against ranx and pytrec_eval.

Synthetic but seeded data: ``--queries`` queries, each with ``--depth`` retrieved
ids (drawn from a shared id universe, de-duplicated keep-first) and 1-5 relevant
ids with grades 1-3, most of them planted in the list. The four seed metrics
(precision, recall, MRR, nDCG) are computed at ``--k`` by:

* ours ``batch_metrics`` on prebuilt padded ``(queries, depth)`` gain arrays,
  and ``evaluate_many`` from the id lists (array building included);
* ranx ``evaluate`` on prebuilt ``Qrels``/``Run`` after a JIT warm-up call on a
  small subset (the first full call, which also sorts the Run, is reported apart;
  so is a call on pre-converted numba typed lists, i.e. ranx's kernels alone);
* ``pytrec_eval.RelevanceEvaluator.evaluate`` (evaluator prebuilt) with
  ``P.k``, ``recall.k``, ``ndcg_cut.k`` and ``recip_rank`` (trec_eval has no RR cutoff).

Each timing is the best of ``--repeats`` runs. The bench exits non-zero unless our
means equal ranx's (and pytrec_eval's P/recall/nDCG) within 1e-9. The last line
is ``ours_s=<x> ranx_s=<y> pytrec_s=<z> vs_ranx=<r1> vs_pytrec=<r2>``.

Usage: python bench/metrics_bench.py [--queries 100000] [--depth 100] [--k 10]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchutil import best_time, machine_line  # bench/ is on sys.path

from rag_pipeline.evaluation.metrics import batch_metrics, evaluate_many

TOLERANCE = 1e-9
OURS_TO_RANX = {
    "precision_at_k": "precision@{k}",
    "recall_at_k": "recall@{k}",
    "reciprocal_rank": "mrr@{k}",
    "ndcg_at_k": "ndcg@{k}",
}
OURS_TO_TREC = {"precision_at_k": "P_{k}", "recall_at_k": "recall_{k}", "ndcg_at_k": "ndcg_cut_{k}"}


def make_data(n_queries: int, depth: int, seed: int):
    """Return ``(retrieved lists, relevance dicts)`` for a seeded synthetic corpus."""
    rng = np.random.default_rng(seed)
    universe = np.array([f"doc{i}" for i in range(max(20 * depth, 1000))], dtype=object)
    drawn = universe[rng.integers(0, universe.size, (n_queries, depth))].tolist()
    retrieved = [list(dict.fromkeys(row)) for row in drawn]
    n_rel = rng.integers(1, 6, n_queries)
    grades = rng.integers(1, 4, (n_queries, 5)).tolist()
    positions = (depth * rng.random((n_queries, 5)) ** 2).astype(int).tolist()  # skew to top
    planted = (rng.random((n_queries, 5)) < 0.7).tolist()
    outsiders = universe[rng.integers(0, universe.size, (n_queries, 5))].tolist()
    relevant = []
    for i, ids in enumerate(retrieved):
        rel: dict[str, int] = {}
        for j in range(n_rel[i]):
            doc = ids[positions[i][j] % len(ids)] if planted[i][j] else outsiders[i][j]
            rel.setdefault(doc, grades[i][j])
        relevant.append(rel)
    return retrieved, relevant


def padded_arrays(retrieved, relevant) -> tuple[np.ndarray, np.ndarray]:
    """Full-depth ``gains`` and ``ideal_gains`` arrays (the fusion sweep's input format)."""
    gains = np.zeros((len(retrieved), max(map(len, retrieved))))
    ideal = np.zeros((len(retrieved), max(map(len, relevant))))
    for i, (ids, rel) in enumerate(zip(retrieved, relevant)):
        gains[i, : len(ids)] = [rel.get(doc, 0) for doc in ids]
        ideal[i, : len(rel)] = sorted(rel.values(), reverse=True)
    return gains, ideal


def time_all(retrieved, relevant, k: int, repeats: int) -> dict[str, tuple[float, dict]]:
    """Time every implementation; map a row label to (best seconds, means by our names)."""
    import pytrec_eval
    from ranx import Qrels, Run, evaluate

    gains, ideal = padded_arrays(retrieved, relevant)
    qids = [f"q{i}" for i in range(len(retrieved))]
    depth = max(map(len, retrieved))
    scores = [float(depth - r) for r in range(depth)]  # score encodes the rank, no ties
    run_dict = {q: dict(zip(ids, scores)) for q, ids in zip(qids, retrieved)}
    qrels_dict = dict(zip(qids, relevant))
    ranx_names = {name: pattern.format(k=k) for name, pattern in OURS_TO_RANX.items()}
    trec_names = {name: pattern.format(k=k) for name, pattern in OURS_TO_TREC.items()}
    warm = qids[:200]  # >= 10 queries, else ranx pins numba to one thread for good
    evaluate(Qrels({q: qrels_dict[q] for q in warm}), Run({q: run_dict[q] for q in warm}),
             list(ranx_names.values()))
    ranx_qrels, ranx_run = Qrels(qrels_dict), Run(run_dict)
    measures = {f"P.{k}", f"recall.{k}", f"ndcg_cut.{k}", "recip_rank"}
    trec_eval = pytrec_eval.RelevanceEvaluator(qrels_dict, measures)

    def ours(out: dict[str, np.ndarray]) -> dict[str, float]:
        return {name: float(out[name].mean()) for name in OURS_TO_RANX}

    def ranx(qrels, run) -> dict[str, float]:
        means = evaluate(qrels, run, list(ranx_names.values()))
        return {name: float(means[metric]) for name, metric in ranx_names.items()}

    def trec() -> dict[str, float]:
        per_query = trec_eval.evaluate(run_dict)
        return {n: float(np.mean([per_query[q][m] for q in qids])) for n, m in trec_names.items()}

    rows = {
        "ours batch_metrics (prebuilt arrays)": best_time(
            lambda: ours(batch_metrics(gains, ideal, k)), max(repeats, 5)),
        "ours evaluate_many (from id lists)": best_time(
            lambda: ours(evaluate_many(retrieved, relevant, k)), repeats),
        "ranx evaluate (first call, sorts Run)": best_time(
            lambda: ranx(ranx_qrels, ranx_run), 1),
        "ranx evaluate (warm)": best_time(lambda: ranx(ranx_qrels, ranx_run), repeats),
    }
    typed = ranx_qrels.to_typed_list(), ranx_run.to_typed_list()
    rows["ranx kernels only (pre-typed lists)"] = best_time(lambda: ranx(*typed), repeats)
    rows["pytrec_eval evaluate"] = best_time(trec, repeats)  # includes averaging per-query dicts
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return 0, or 1 when the averages disagree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="unsafe cast from uint64")  # ranx/numba noise

    retrieved, relevant = make_data(args.queries, args.depth, args.seed)
    rows = time_all(retrieved, relevant, args.k, args.repeats)
    ours_s, ours_means = rows["ours batch_metrics (prebuilt arrays)"]
    ranx_s, pytrec_s = rows["ranx evaluate (warm)"][0], rows["pytrec_eval evaluate"][0]
    print(f"queries={args.queries} depth={args.depth} k={args.k} repeats={args.repeats} (best-of)")
    print(machine_line())
    print("means: " + " ".join(f"{n}={v:.6f}" for n, v in ours_means.items()))
    worst_diff, worst = 0.0, ""
    for label, (seconds, means) in rows.items():
        print(f"{label:<40} {seconds:9.4f} s  ranx_warm/this={ranx_s / seconds:8.2f}"
              f"  pytrec/this={pytrec_s / seconds:8.2f}")
        for name, value in means.items():
            if abs(value - ours_means[name]) >= worst_diff:
                worst_diff, worst = abs(value - ours_means[name]), f"{label}: {name}"
    print(f"max |mean diff| vs ours = {worst_diff:.2e} ({worst})")
    if worst_diff > TOLERANCE:
        print(f"FAIL: averages differ by more than {TOLERANCE}", file=sys.stderr)
        return 1
    print(f"ours_s={ours_s:.6f} ranx_s={ranx_s:.6f} pytrec_s={pytrec_s:.6f} "
          f"vs_ranx={ranx_s / ours_s:.2f} vs_pytrec={pytrec_s / ours_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
