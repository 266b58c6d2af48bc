"""One run's stored candidate pools (docs/design.md §4) as padded numpy arrays, for offline re-fusion
(:func:`evaluate_fusion`, :func:`evaluate_configs`). Padding: ``mask`` False, NaN scores and ranks, gain 0."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import sqlalchemy as sa

from rag_pipeline.evaluation.metrics import batch_metrics
from rag_pipeline.evaluation.runs.candidate_queries import leg_scores, pools_of_run
from rag_pipeline.evaluation.runs.case_queries import labels_of_run
from rag_pipeline.retrieval.fusion import fuse_batch, normalize_batch, order_batch, weighted_fusion_batch
from rag_pipeline.retrieval.stages import first_stage_ranks

_SLOT_FIELDS = ("chunk_ids", "vector_score", "keyword_score", "vector_rank", "keyword_rank", "mask",
                "chunk_rank", "gains", "stored_rank", "stored_final", "rerank_score")


@dataclass(frozen=True, eq=False)
class PoolSet:
    """Padded ``(n_cases, pool_size)`` arrays; ``stored_rank`` / ``stored_final``: the run's own (0 / NaN in
    padding); ``n_relevant`` counts the relevant chunks the pool missed too; ``ideal_gains`` as
    :func:`~rag_pipeline.evaluation.metrics.batch_metrics` takes it."""

    case_ids: np.ndarray
    chunk_ids: np.ndarray
    vector_score: np.ndarray
    keyword_score: np.ndarray
    vector_rank: np.ndarray
    keyword_rank: np.ndarray
    mask: np.ndarray
    chunk_rank: np.ndarray
    gains: np.ndarray
    stored_rank: np.ndarray
    stored_final: np.ndarray
    n_relevant: np.ndarray
    ideal_gains: np.ndarray
    k: np.ndarray
    strategy_version: str | None = None
    rerank_score: np.ndarray | None = None  # the rerank stage's score (NaN: not re-scored); None: not loaded

    @property
    def n_cases(self) -> int:
        return int(self.case_ids.size)

    @property
    def pool_size(self) -> int:
        return int(self.mask.shape[1])

    def reorder_slots(self, order: np.ndarray) -> PoolSet:
        """The same pools with each row's slots permuted by ``order`` (``(n_cases, pool_size)``
        slot indices, e.g. from :func:`~rag_pipeline.retrieval.fusion.order_batch`)."""
        if order.shape != self.mask.shape:
            raise ValueError(f"order shape {order.shape} != pool shape {self.mask.shape}")
        changed: dict[str, Any] = {f.name: np.take_along_axis(getattr(self, f.name), order, axis=1)
                   for f in fields(self) if f.name in _SLOT_FIELDS and getattr(self, f.name) is not None}
        return dataclasses.replace(self, **changed)


def _float_or_nan(values: Iterable[Any]) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


def pools_from_rows(candidate_rows: Iterable[Mapping[Any, Any]], case_rows: Iterable[Mapping[Any, Any]]) -> PoolSet:
    """A :class:`PoolSet` from candidate rows (the stored fields; ``None``: a missing leg) and case-result rows
    (``case_id, k, relevant_chunk_ids``, optional ``relevance_grades``; they fix the case order). ``ValueError``
    for rows that do not fit together (unknown case, duplicate chunk or rank, wrong ``is_relevant``)."""
    cases = list(case_rows)
    rows = list(candidate_rows)
    case_ids = np.array([str(c["case_id"]) for c in cases], dtype=object)
    position = {cid: i for i, cid in enumerate(case_ids)}
    if len(position) != len(cases):
        raise ValueError("duplicate case_id in case rows")
    relevant = [frozenset(str(x) for x in c["relevant_chunk_ids"]) for c in cases]
    # Graded cases (``relevance_grades``: every judged id -> grade, 0 included): nDCG gains are the grades.
    grade_of = [{str(i): int(g) for i, g in (c.get("relevance_grades") or {}).items() if int(g) >= 1}
                or dict.fromkeys(r, 1) for c, r in zip(cases, relevant, strict=True)]
    n_relevant = np.array([len(r) for r in relevant], dtype=np.int64)
    if np.any(n_relevant == 0):
        raise ValueError(f"case {case_ids[np.argmax(n_relevant == 0)]!r} has no relevant chunk")
    k = np.array([int(c["k"]) for c in cases], dtype=np.int64)

    try:
        row_case = np.array([position[str(r["case_id"])] for r in rows], dtype=np.int64)
    except KeyError as exc:
        raise ValueError(f"candidate of case {exc.args[0]!r}, which has no case result") from None
    chunk = np.array([str(r["chunk_id"]) for r in rows], dtype=object)
    stored_rank = np.array([int(r["rank"]) for r in rows], dtype=np.int64)
    flagged = np.array([bool(r["is_relevant"]) for r in rows], dtype=bool)
    truth = np.array([c in relevant[i] for c, i in zip(chunk, row_case)], dtype=bool)
    if np.any(flagged != truth):
        bad = int(np.argmax(flagged != truth))
        raise ValueError(f"case {case_ids[row_case[bad]]!r}: chunk {chunk[bad]} has is_relevant="
                         f"{bool(flagged[bad])} but relevant_chunk_ids says {bool(truth[bad])}")

    # Slot of each row: its position among its case's rows in stored-rank order.
    by_slot = np.lexsort((stored_rank, row_case))
    counts = np.bincount(row_case, minlength=len(cases))
    starts = np.cumsum(counts) - counts
    slot = np.empty(len(rows), dtype=np.int64)
    slot[by_slot] = np.arange(len(rows)) - starts[row_case[by_slot]]
    shape = (len(cases), int(counts.max(initial=0)))
    unique, chunk_ordinal = np.unique(chunk.astype(str), return_inverse=True)
    pair = row_case * (unique.size + 1) + chunk_ordinal
    if np.unique(pair).size != pair.size:
        raise ValueError("a chunk occurs twice in one case's pool")
    if np.unique(row_case * (stored_rank.max(initial=0) + 1) + stored_rank).size != len(rows):
        raise ValueError("two candidates of one case share a rank")

    def padded(values: np.ndarray, fill: Any, dtype: Any) -> np.ndarray:
        out = np.full(shape, fill, dtype=dtype)
        out[row_case, slot] = values
        return out

    versions = {v for r in rows if (v := r.get("strategy_version")) is not None}
    if len(versions) > 1:
        raise ValueError(f"candidates of several strategy versions: {sorted(versions)}")
    max_rel = int(n_relevant.max(initial=0))
    ideal = np.zeros((len(cases), max_rel))
    for i, grades in enumerate(grade_of):
        ideal[i, :len(grades)] = sorted(grades.values(), reverse=True)
    row_gain = np.array([grade_of[i].get(c, 0) for c, i in zip(chunk, row_case)], dtype=float)
    return PoolSet(
        case_ids=case_ids,
        chunk_ids=padded(chunk, None, object),
        vector_score=padded(_float_or_nan(r["vector_score"] for r in rows), np.nan, float),
        keyword_score=padded(_float_or_nan(r["keyword_score"] for r in rows), np.nan, float),
        vector_rank=padded(_float_or_nan(r["vector_rank"] for r in rows), np.nan, float),
        keyword_rank=padded(_float_or_nan(r["keyword_rank"] for r in rows), np.nan, float),
        mask=padded(np.ones(len(rows), dtype=bool), False, bool),
        chunk_rank=padded(chunk_ordinal.astype(np.int64), 0, np.int64),
        gains=padded(row_gain, 0.0, float),
        stored_rank=padded(stored_rank, 0, np.int64),
        stored_final=padded(_float_or_nan(r["final_score"] for r in rows), np.nan, float),
        n_relevant=n_relevant,
        ideal_gains=ideal,
        k=k,
        strategy_version=versions.pop() if versions else None,
        rerank_score=padded(_float_or_nan(r.get("rerank_score") for r in rows), np.nan, float))


def pool_recall(pools: PoolSet) -> np.ndarray:
    """Per case: relevant chunks anywhere in the pool / all relevant chunks of the case."""
    return np.count_nonzero((pools.gains > 0) & pools.mask, axis=1) / pools.n_relevant


def recall_ceiling(pools: PoolSet) -> float:
    """Mean :func:`pool_recall`: no fusion of these pools can reach a higher mean recall@k."""
    return float(pool_recall(pools).mean())


def fused_order(pools: PoolSet, config: Any) -> np.ndarray:
    """Per-case slot indices, best first, under ``config`` (padding last)."""
    final = fuse_batch(config, pools.vector_score, pools.keyword_score, pools.vector_rank, pools.keyword_rank,
                       pools.mask)
    return order_batch(final, pools.vector_score, pools.chunk_rank, pools.mask)


def evaluate_fusion(pools: PoolSet, config: Any) -> dict[str, np.ndarray]:
    """Every metric under ``config``, as ``(n_cases,)`` arrays."""
    gains = np.take_along_axis(pools.gains, fused_order(pools, config), axis=1)
    return batch_metrics(gains, pools.ideal_gains, pools.k)


def evaluate_configs(pools: PoolSet, configs: Sequence[Any]) -> list[dict[str, np.ndarray]]:
    """:func:`evaluate_fusion` for many configurations, equal bit for bit but faster: slots are put in tie-break
    order once, so a stable sort on the final score alone gives ``order_batch``'s order, and each normalisation
    is computed once (weighted fusion of pre-normalised legs with ``none`` is the same fusion)."""
    tie_break = order_batch(np.zeros(pools.mask.shape), pools.vector_score, pools.chunk_rank, pools.mask)
    p = pools.reorder_slots(tie_break)
    normalized: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    results = []
    for config in configs:
        if config.fusion == "weighted":
            if config.normalization not in normalized:
                normalized[config.normalization] = (
                    normalize_batch(p.vector_score, config.normalization, p.mask, p.vector_rank),
                    normalize_batch(p.keyword_score, config.normalization, p.mask, p.keyword_rank))
            nv, nk = normalized[config.normalization]
            final = weighted_fusion_batch(nv, nk, config.vector_weight, config.keyword_weight, "none", p.mask)
        else:
            final = fuse_batch(config, p.vector_score, p.keyword_score, p.vector_rank, p.keyword_rank, p.mask)
        ordered = np.argsort(-final, axis=1, kind="stable")
        gains = np.take_along_axis(p.gains, ordered, axis=1)
        results.append(batch_metrics(gains, p.ideal_gains, p.k))
    return results


def load_pools(conn: Any, evaluation_run_id: Any) -> PoolSet:
    """One evaluation run's pools (two queries), cases in ``case_index`` order; answerable cases only (an
    unanswerable one has no metric to tune, docs/design.md §12.1)."""
    cases = labels_of_run(conn, evaluation_run_id)
    if not cases:
        raise ValueError(f"evaluation run {evaluation_run_id} has no case results of answerable cases")
    scored = {str(c["case_id"]) for c in cases}
    candidates = [r for r in pools_of_run(conn, evaluation_run_id) if str(r["case_id"]) in scored]
    return pools_from_rows(candidates, cases)


def first_stage_ranks_of_cases(conn: sa.Connection, run_id, strategy, cases: list[str]) -> dict[str, dict[str, int]]:
    """Per case, chunk id -> rank before the rerank stage, from the case's whole stored pool."""
    pools: dict[str, list[dict]] = {case: [] for case in cases}
    for row in leg_scores(conn, run_id, cases):
        pools[row["case_id"]].append(dict(row))
    return {case: first_stage_ranks(strategy, pool) for case, pool in pools.items()}
