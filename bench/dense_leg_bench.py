"""The exact vector leg's arithmetic, side by side: the former float64 product of the whole knowledge base per batch
against the float32 preselection with float64 rescoring (``retrieval/dense_index.py``).

Random unit-free 512-d vectors (numpy's normal), N chunks, 64 questions (one evaluation batch), k = 10 and 100;
best of 3 per cell. ``former_top`` is the leg as it was until the preselection: every chunk scored by a float64
matrix product in blocks of 8,192 vectors, the top k by (score desc, chunk id asc). Both must give the same chunk
ids in the same order; the bench exits 1 otherwise. No database: only the leg's arithmetic.

``python bench/dense_leg_bench.py [--sizes 5000,20000,100000]``
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchutil import machine_line  # noqa: E402


def former_top(index, questions: np.ndarray, k: int) -> list[list]:
    """The former leg: float64 scores of every chunk, per question its top k hits (score desc, chunk id asc)."""
    from rag_pipeline.retrieval.trace import LegHit

    vectors, norms = index.vectors, index.norms
    q = questions.astype(np.float64)
    dot = np.empty((len(q), len(vectors)))
    for at in range(0, len(vectors), 8192):
        dot[:, at:at + 8192] = q @ vectors[at:at + 8192].T.astype(np.float64)
    scores = 1.0 - (1.0 - np.clip(dot / np.sqrt((q * q).sum(axis=1)[:, None] * norms[None, :]), -1.0, 1.0))
    out = []
    for row in np.where(np.isnan(scores), -np.inf, scores):
        kth = -np.partition(-row, k - 1)[k - 1]
        keep = np.flatnonzero(row >= kth)
        order = keep[np.lexsort((keep, -row[keep]))][:k]
        out.append(list(map(LegHit, index.chunk_ids[order].tolist(), index.document_ids[order].tolist(),
                            index.document_names[order].tolist(), row[order].tolist())))
    return out


def best_of_3(run) -> tuple[float, list[list[str]]]:
    """The fastest of 3 calls of ``run`` (per question, its hits) and the chunk ids it found."""
    best, hits = float("inf"), []
    for _ in range(3):
        start = time.perf_counter()
        hits = run()
        best = min(best, time.perf_counter() - start)
    return best, [[h.chunk_id for h in row] for row in hits]


def main(argv: list[str] | None = None) -> int:
    from rag_pipeline.retrieval.dense_index import DenseIndex

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="5000,20000,100000")
    parser.add_argument("--dimension", type=int, default=512)
    args = parser.parse_args(argv)
    print(machine_line())
    print("| N | k | former float64 leg (ms) | float32 + rescoring (ms) | ratio | same ids in the same order |")
    print("|---:|---:|---:|---:|---:|---|")
    rng = np.random.default_rng(0)
    same_everywhere = True
    for n in map(int, args.sizes.split(",")):
        vectors = rng.standard_normal((n, args.dimension)).astype(np.float32)
        ids = np.array([f"{i:036d}" for i in range(n)], dtype=object)
        norms = np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64)
        index = DenseIndex("kb", "m", vectors, norms, ids, ids, ids)
        questions = rng.standard_normal((64, args.dimension)).astype(np.float32)
        for k in (10, 100):
            t_former, former = best_of_3(functools.partial(former_top, index, questions, k))
            t_new, new = best_of_3(functools.partial(index.top, questions, k))
            same = former == new
            same_everywhere &= same
            verdict = "yes" if same else "**no**"
            print(f"| {n:,} | {k} | {t_former * 1000:.1f} | {t_new * 1000:.1f} | {t_former / t_new:.1f} | {verdict} |")
    return 0 if same_everywhere else 1


if __name__ == "__main__":
    raise SystemExit(main())
