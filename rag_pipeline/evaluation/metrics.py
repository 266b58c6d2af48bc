"""Retrieval-quality metrics with trec_eval conventions, numpy only: definitions in docs/design.md §5.

Relevance is a set of ids (every grade 1) or ``{id: grade}`` (grade > 0 relevant, gain = grade; only nDCG is
graded); the ranked list is de-duplicated keeping first occurrences. :func:`evaluate_retrieval` is the readable
per-case reference, :func:`batch_metrics` the vectorised core and :func:`evaluate_many` its id-list front."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence, Set
from itertools import islice
from numbers import Integral

import numpy as np

from rag_pipeline.contracts.metrics import METRIC_NAMES, Metrics

__all__ = ["METRIC_NAMES", "Metrics", "batch_metrics", "evaluate_many", "evaluate_retrieval", "judged_at_k"]
Relevance = set[str] | frozenset[str] | Mapping[str, float]


def _check_k(k: object) -> int:
    """Return ``k`` as an int, raising ``ValueError`` unless it is a positive integer."""
    if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return int(k)


def _relevant_grades(relevant: Relevance) -> dict[str, float]:
    """Each relevant id (grade > 0) -> its grade (a set: 1); ``ValueError`` if none, or a grade not finite."""
    if isinstance(relevant, str):
        raise TypeError("relevant ids must be a set or a mapping, not a str")
    if isinstance(relevant, Mapping):
        grades = {doc: float(grade) for doc, grade in relevant.items()}
        if not all(math.isfinite(g) for g in grades.values()):
            raise ValueError("relevance grades must be finite numbers")
        grades = {doc: g for doc, g in grades.items() if g > 0}
    else:
        grades = dict.fromkeys(relevant, 1.0)
    if not grades:
        raise ValueError("a case needs at least one relevant id (grade > 0)")
    return grades


def _unique_prefix(ids: Sequence[str], k: int) -> list[str]:
    """Return the first ``k`` distinct ids of ``ids``, keeping first occurrences."""
    return list(islice(dict.fromkeys(ids), k))


def evaluate_retrieval(retrieved_ids: Sequence[str], relevant_ids: Relevance, k: int) -> Metrics:
    """Every metric for one case; ``retrieved_ids`` best first (duplicates and a short list allowed)."""
    k = _check_k(k)
    grades = _relevant_grades(relevant_ids)
    n_rel = len(grades)
    hits, rr, ap_sum, dcg = 0, 0.0, 0.0, 0.0
    for rank, doc in enumerate(_unique_prefix(retrieved_ids, k), start=1):
        gain = grades.get(doc, 0.0)
        if gain > 0:
            hits += 1
            rr = rr or 1.0 / rank
            ap_sum += hits / rank
        dcg += gain / math.log2(rank + 1)
    ideal = sorted(grades.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, start=1))
    r_hits = sum(doc in grades for doc in _unique_prefix(retrieved_ids, n_rel))
    return Metrics(precision_at_k=hits / k, recall_at_k=hits / n_rel, reciprocal_rank=rr, ndcg_at_k=dcg / idcg,
                   hit_at_k=float(hits > 0), average_precision_at_k=ap_sum / n_rel, r_precision=r_hits / n_rel)


def _k_array(k: np.ndarray | Sequence[int] | int, n_cases: int) -> np.ndarray:
    """Broadcast ``k`` to an int64 array of shape ``(n_cases,)`` and validate it."""
    arr = np.asarray(k)
    if arr.dtype.kind not in "iu" or arr.ndim > 1:
        raise ValueError("k must be a positive integer or a 1-D integer array")
    if arr.ndim == 1 and arr.shape[0] != n_cases:
        raise ValueError(f"k has {arr.shape[0]} entries for {n_cases} cases")
    if arr.size and arr.min() < 1:
        raise ValueError("every k must be a positive integer")
    return np.broadcast_to(arr.astype(np.int64, copy=False), (n_cases,))


def batch_metrics(gains: np.ndarray, ideal_gains: np.ndarray, k: np.ndarray | int) -> dict[str, np.ndarray]:
    """One float64 ``(n_cases,)`` array per metric. ``gains`` ``(n_cases, depth)``: the grade at each rank of the
    de-duplicated list (0: not relevant, padding); ``ideal_gains`` ``(n_cases, max R)``: each case's relevant
    grades sorted descending, 0-padded; ``k`` scalar or per case. ``r_precision`` reads the first R columns of
    ``gains``; only the first max(k, R) columns are read."""
    gains = np.asarray(gains)
    ideal = np.asarray(ideal_gains, dtype=np.float64)
    if gains.ndim != 2 or ideal.ndim != 2 or gains.shape[0] != ideal.shape[0]:
        raise ValueError("gains and ideal_gains must be 2-D with one row per case")
    n_cases = gains.shape[0]
    if gains.shape[1] == 0:  # all lists empty: one zero column keeps shapes simple
        gains = np.zeros((n_cases, 1))
    k_arr = _k_array(k, n_cases)
    n_rel = np.count_nonzero(ideal > 0, axis=1)
    if np.any(n_rel == 0):
        raise ValueError("every case needs at least one relevant id (grade > 0)")
    if np.any(np.diff(ideal, axis=1) > 0):
        raise ValueError("ideal_gains rows must be sorted in descending order")

    k_max = int(k_arr.max()) if n_cases else 1
    cols = min(k_max, gains.shape[1])
    ranks = np.arange(1, cols + 1)
    discount = 1.0 / np.log2(np.arange(2, max(cols, ideal.shape[1]) + 2))
    top = gains[:, :cols].astype(np.float64, copy=False)
    if np.ndim(k) != 0:  # per-case k: zero the ranks past each case's cutoff
        top = np.where(ranks <= k_arr[:, None], top, 0.0)
    relevant = top > 0
    cum_hits = np.cumsum(relevant, axis=1)
    hits = cum_hits[:, -1]
    dcg = top @ discount[:cols]

    icols = min(k_max, ideal.shape[1])
    ideal_top = np.where(np.arange(1, icols + 1) <= k_arr[:, None], ideal[:, :icols], 0.0)
    idcg = ideal_top @ discount[:icols]

    r_cols = min(int(n_rel.max()) if n_cases else 0, gains.shape[1])
    in_r = np.arange(1, r_cols + 1) <= n_rel[:, None]
    r_hits = np.count_nonzero((gains[:, :r_cols] > 0) & in_r, axis=1)

    first = np.argmax(relevant, axis=1)
    return {
        "precision_at_k": hits / k_arr,
        "recall_at_k": hits / n_rel,
        "reciprocal_rank": np.where(hits > 0, 1.0 / (first + 1), 0.0),
        "ndcg_at_k": dcg / idcg,
        "hit_at_k": (hits > 0).astype(np.float64),
        "average_precision_at_k": np.where(relevant, cum_hits / ranks, 0.0).sum(axis=1) / n_rel,
        "r_precision": r_hits / n_rel}


def _pad_rows(rows: list[list[float]]) -> np.ndarray:
    """Stack ragged float rows into a 0-padded ``(len(rows), max length)`` array."""
    lengths = np.fromiter(map(len, rows), np.int64, len(rows))
    out = np.zeros((len(rows), int(lengths.max(initial=0))), dtype=np.float64)
    flat = np.fromiter((v for row in rows for v in row), np.float64, int(lengths.sum()))
    row_idx = np.repeat(np.arange(len(rows)), lengths)
    starts = np.cumsum(lengths) - lengths
    out[row_idx, np.arange(flat.size) - np.repeat(starts, lengths)] = flat
    return out


def evaluate_many(retrieved: Sequence[Sequence[str]], relevant: Sequence[Relevance],
                  k: Sequence[int] | int) -> dict[str, np.ndarray]:
    """:func:`batch_metrics` of many cases given as :func:`evaluate_retrieval` takes one (the first max(k, R)
    unique ids of each list: all any metric reads)."""
    if len(retrieved) != len(relevant):
        raise ValueError("retrieved and relevant must have one entry per case")
    k_arr = _k_array(_check_k(k) if np.ndim(k) == 0 else k, len(retrieved))
    gain_rows, ideal_rows = [], []
    for ids, rel, case_k in zip(retrieved, relevant, k_arr.tolist()):
        grades = _relevant_grades(rel)
        ideal_rows.append(sorted(grades.values(), reverse=True))
        depth = max(case_k, len(grades))
        gain_rows.append([grades.get(doc, 0.0) for doc in _unique_prefix(ids, depth)])
    return batch_metrics(_pad_rows(gain_rows), _pad_rows(ideal_rows), _check_k(k) if np.ndim(k) == 0 else k_arr)


def judged_at_k(retrieved_ids: Sequence[str], judged_ids: Set[str] | Mapping[str, float], k: int) -> float | None:
    """Judged@k as ir_measures computes it: the share of the top ``k`` distinct retrieved ids that carry a judgment
    (any grade, 0 included), over ``min(k, retrieved)``; ``None`` when nothing was retrieved (undefined)."""
    top = _unique_prefix(retrieved_ids, _check_k(k))
    return sum(doc in judged_ids for doc in top) / len(top) if top else None
