"""Score fusion for hybrid retrieval: per-leg normalisation, weighted sum, RRF, ordering (docs/design.md §3.2, §3.3).

Per pool slot: ``vector_score`` / ``keyword_score`` (NaN where the leg missed the chunk) and 1-based ranks (0 or
NaN where missing). Reductions add the present values in ascending order, so the batch functions (2-D arrays plus
a ``mask``) equal the 1-D ones bit for bit whatever the slot order or padding."""

from __future__ import annotations

from typing import Any, overload

import numpy as np
from numpy.typing import ArrayLike

NORMALIZATIONS = ("none", "minmax", "zscore", "rank", "dbsf")
TIE_BREAK = "final_score desc, vector_score desc (missing last), chunk_id asc"


def _batch(values: ArrayLike, shape: tuple[int, ...] | None = None) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 2 or (shape is not None and array.shape != shape):
        raise ValueError(f"expected a 2-D array of shape {shape or '(n_cases, pool_size)'}, got shape {array.shape}")
    return array


def _valid(mask: ArrayLike | None, shape: tuple[int, ...]) -> np.ndarray:
    if mask is None:
        return np.ones(shape, dtype=bool)
    valid = np.asarray(mask, dtype=bool)
    if valid.shape != shape:
        raise ValueError(f"mask shape {valid.shape} != scores shape {shape}")
    return valid


@overload
def _row(values: ArrayLike) -> np.ndarray: ...
@overload
def _row(values: None) -> None: ...
def _row(values: ArrayLike | None) -> np.ndarray | None:
    return None if values is None else np.asarray(values, dtype=float).reshape(1, -1)


def _sorted_row_sum(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Per-row sum of the present values, added sequentially in ascending order."""
    if values.shape[1] == 0:
        return np.zeros(values.shape[0])
    ascending = np.sort(np.where(present, values, np.inf), axis=1)
    return np.cumsum(np.where(np.isinf(ascending), 0.0, ascending), axis=1)[:, -1]


def _present_ranks(ranks: ArrayLike | None, present: np.ndarray) -> np.ndarray:
    """Ranks of present slots (NaN elsewhere); every present slot needs a rank >= 1."""
    if ranks is None:
        raise ValueError("ranks are required for rank-based normalisation / RRF")
    rank = _batch(ranks, present.shape)
    if np.any(present & ~(np.isfinite(rank) & (rank >= 1))):
        raise ValueError("every present score needs a finite 1-based rank")
    return np.where(present, rank, np.nan)


def normalize_batch(scores: ArrayLike, method: str, mask: ArrayLike | None = None,
                    ranks: ArrayLike | None = None) -> np.ndarray:
    """Normalise one leg per row over its present, valid slots; NaN elsewhere."""
    raw = _batch(scores)
    present = _valid(mask, raw.shape) & ~np.isnan(raw)
    if np.any(present & np.isinf(raw)):
        raise ValueError("scores must be finite or NaN (missing)")
    s = np.where(present, raw, 0.0)
    count = np.maximum(present.sum(axis=1, keepdims=True), 1)
    low = np.min(np.where(present, s, np.inf), axis=1, keepdims=True, initial=np.inf)
    high = np.max(np.where(present, s, -np.inf), axis=1, keepdims=True, initial=-np.inf)
    spread = np.isfinite(low) & (high > low)
    if method == "none":
        out = s
    elif method == "minmax":
        out = np.where(spread, (s - low) / np.where(spread, high - low, 1.0), 1.0)
    elif method in ("zscore", "dbsf"):
        mean = _sorted_row_sum(s, present)[:, None] / count
        var = _sorted_row_sum((s - mean) ** 2, present)[:, None] / count
        std = np.where(spread, np.sqrt(var), 0.0)
        safe = np.where(std > 0, std, 1.0)
        if method == "zscore":
            out = np.where(std > 0, (s - mean) / safe, 0.0)
        else:
            out = np.where(std > 0, np.clip((s - (mean - 3 * std)) / (6 * safe), 0.0, 1.0), 1.0)
    elif method == "rank":
        rank = np.where(present, _present_ranks(ranks, present), 1.0)
        depth = np.max(np.where(present, rank, 1.0), axis=1, keepdims=True, initial=1.0)
        out = (depth - rank + 1.0) / depth
    else:
        raise ValueError(f"unknown normalization {method!r}; expected one of {list(NORMALIZATIONS)}")
    return np.where(present, out, np.nan)


def normalize(scores: ArrayLike, method: str, ranks: ArrayLike | None = None) -> np.ndarray:
    """Normalise one leg of one pool (1-D); missing (NaN) stays NaN. ``ranks`` for ``rank``."""
    return normalize_batch(_row(scores), method, ranks=_row(ranks))[0]


def weighted_fusion_batch(vector_score: ArrayLike, keyword_score: ArrayLike,
                          vector_weight: float, keyword_weight: float,
                          normalization: str = "none", mask: ArrayLike | None = None,
                          vector_rank: ArrayLike | None = None, keyword_rank: ArrayLike | None = None) -> np.ndarray:
    """``wv * norm(vs) + wk * norm(ks)`` with missing -> 0; masked slots -> -inf."""
    vs = _batch(vector_score)
    valid = _valid(mask, vs.shape)
    nv = normalize_batch(vs, normalization, valid, vector_rank)
    nk = normalize_batch(_batch(keyword_score, vs.shape), normalization, valid, keyword_rank)
    final = (vector_weight * np.where(np.isnan(nv), 0.0, nv) + keyword_weight * np.where(np.isnan(nk), 0.0, nk))
    return np.where(valid, final, -np.inf)


def rrf_fusion_batch(vector_rank: ArrayLike, keyword_rank: ArrayLike, k: float = 60,
                     vector_weight: float = 1.0, keyword_weight: float = 1.0,
                     mask: ArrayLike | None = None) -> np.ndarray:
    """Reciprocal rank fusion ``sum(w / (k + rank))`` over present legs (rank 0 or NaN: absent, else >= 1);
    masked slots -> -inf."""
    vr = _batch(vector_rank)
    valid = _valid(mask, vr.shape)
    final = np.zeros(vr.shape)
    for ranks, weight in ((vr, vector_weight), (_batch(keyword_rank, vr.shape), keyword_weight)):
        present = valid & ~np.isnan(ranks) & (ranks != 0)
        rank = _present_ranks(ranks, present)
        final = final + np.where(present, weight / (k + np.where(present, rank, 1.0)), 0.0)
    return np.where(valid, final, -np.inf)


def fuse_batch(strategy: Any, vector_score: ArrayLike, keyword_score: ArrayLike,
               vector_rank: ArrayLike | None = None, keyword_rank: ArrayLike | None = None,
               mask: ArrayLike | None = None) -> np.ndarray:
    """Final scores per slot (masked: -inf) for any object with ``fusion``, ``normalization``, the weights and
    ``rrf_k`` (e.g. a Strategy); RRF uses the ranks of the legs whose score is present."""
    if strategy.fusion == "weighted":
        return weighted_fusion_batch(vector_score, keyword_score, strategy.vector_weight,
                                     strategy.keyword_weight, strategy.normalization, mask, vector_rank, keyword_rank)
    if strategy.fusion != "rrf":
        raise ValueError(f"unknown fusion {strategy.fusion!r}; expected 'weighted' or 'rrf'")
    if strategy.normalization != "none":
        raise ValueError("fusion 'rrf' uses ranks only; normalization must be 'none'")
    vs = _batch(vector_score)
    valid = _valid(mask, vs.shape)
    vr = _present_ranks(vector_rank, valid & ~np.isnan(vs))
    kr = _present_ranks(keyword_rank, valid & ~np.isnan(_batch(keyword_score, vs.shape)))
    return rrf_fusion_batch(vr, kr, strategy.rrf_k, strategy.vector_weight, strategy.keyword_weight, valid)


def fuse(strategy: Any, vector_score: ArrayLike, keyword_score: ArrayLike,
         vector_rank: ArrayLike | None = None, keyword_rank: ArrayLike | None = None) -> np.ndarray:
    """1-D :func:`fuse_batch` for one pool (ranks needed only for ``rank`` / ``rrf``)."""
    return fuse_batch(strategy, _row(vector_score), _row(keyword_score), _row(vector_rank), _row(keyword_rank))[0]


def order_batch(final: ArrayLike, vector_score: ArrayLike, chunk_rank: ArrayLike,
                mask: ArrayLike | None = None) -> np.ndarray:
    """Per-row slot indices in :data:`TIE_BREAK` order, masked slots last; ``chunk_rank`` is any integer
    array ordered like the chunk ids."""
    scores = _batch(final)
    valid = _valid(mask, scores.shape)
    if np.any(valid & np.isnan(scores)):
        raise ValueError("final scores of valid slots must not be NaN")
    vs = _batch(vector_score, scores.shape)
    ids = np.asarray(chunk_rank)
    if ids.shape != scores.shape:
        raise ValueError(f"chunk_rank shape {ids.shape} != final shape {scores.shape}")
    vector_key = np.where(valid & ~np.isnan(vs), -vs, np.inf)
    final_key = np.where(valid, -scores, np.inf)
    return np.lexsort((np.where(valid, ids, 0), vector_key, final_key, ~valid), axis=-1)


def order(final: ArrayLike, vector_score: ArrayLike, chunk_ids: ArrayLike) -> np.ndarray:
    """Indices of one pool in :data:`TIE_BREAK` order; chunk ids must be unique. The chunk ids are ranked only when
    two slots tie on both scores: otherwise the scores alone give the same order (:func:`order_batch`'s)."""
    ids = np.asarray(chunk_ids)
    if len(set(ids.tolist())) != ids.size:
        raise ValueError("chunk ids within a pool must be unique")
    scores, vs = _row(final)[0], _row(vector_score)[0]
    if np.isnan(scores).any():
        raise ValueError("final scores of valid slots must not be NaN")
    if vs.shape != scores.shape or ids.shape != scores.shape:
        raise ValueError(f"shapes differ: final {scores.shape}, vector_score {vs.shape}, chunk_ids {ids.shape}")
    final_key, vector_key = -scores, np.where(np.isnan(vs), np.inf, -vs)
    by_scores = np.lexsort((vector_key, final_key))
    f, v = final_key[by_scores], vector_key[by_scores]
    if not ((f[1:] == f[:-1]) & (v[1:] == v[:-1])).any():
        return by_scores
    ordinal = np.unique(ids, return_inverse=True)[1].reshape(1, -1)
    return order_batch(_row(final), _row(vector_score), ordinal)[0]
