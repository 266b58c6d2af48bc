"""Why a relevant chunk was (not) retrieved, from the stored pool (docs/design.md §4.3): :func:`classify_misses`
is pure; :mod:`.diagnose` adds the computed scores."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter

from rag_pipeline.contracts.label_check import STATUSES as LABEL_STATUSES
from rag_pipeline.contracts.reports import MissReason
from rag_pipeline.contracts.runs import MissReasonCounts
from rag_pipeline.evaluation.datasets.load import relevant_ids_of

RETRIEVAL_REASONS = ("hit", "below_cutoff_after_rerank", "below_cutoff", "vector_only", "keyword_only", "not_in_pool")
INVALID_LABEL_REASONS = tuple(s for s in LABEL_STATUSES if s != "ok")
REASONS = RETRIEVAL_REASONS + INVALID_LABEL_REASONS
LEGS = ("vector", "keyword")
REASONS_JSON = TypeAdapter(list[MissReason])
"""A case's reasons as stored (``miss_reasons``): ``REASONS_JSON.dump_json(reasons)``."""


def miss_reason(**fields: Any) -> MissReason:
    """A :class:`MissReason` of trusted values (no validation: the hot path), its ``detail`` written."""
    m = MissReason.model_construct(**fields, detail="")
    m.detail = _describe(m)
    return m


def with_scores(m: MissReason, scores: Mapping[str, float | int | None]) -> MissReason:
    """``m`` with the missing legs' own scores (and ranks) computed."""
    out = m.model_copy(update={**scores, "scores_computed": True})
    out.detail = _describe(out)
    return out


def _get(obj, name: str):
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _column(items: Sequence, name: str) -> list:
    """``_get(item, name)`` of every item (mappings or objects, all of one kind)."""
    if items and isinstance(items[0], Mapping):
        return [c.get(name) for c in items]
    return [getattr(c, name, None) for c in items]


def _case(case) -> tuple[str, list[str], int]:
    """Case id, the ids that count as relevant (grade >= 1: grade-0 judgments get no reason), k."""
    return str(_get(case, "case_id")), relevant_ids_of(_get(case, "relevant_chunk_ids")), int(_get(case, "k"))


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.4f}"


def _leg_clause(m: MissReason, leg: str) -> str:
    own, rank = getattr(m, f"{leg}_score"), getattr(m, f"{leg}_rank")
    last, size = getattr(m, f"{leg}_last_score"), getattr(m, f"{leg}_leg_size")
    if own is None:
        if not m.scores_computed:
            return f"{leg} score not computed"
        return "keyword score: no query term in the chunk" if leg == "keyword" else f"no {leg} embedding"
    if m.reason != "not_in_pool":  # the other leg's own score for a one-leg pool member
        return f"its {leg} score {_fmt(own)}" + (f" (would be {leg} rank {rank})" if rank else "") + (
            f" vs {_fmt(last)} for the last of the leg's {size} pool candidates" if last is not None else "")
    where = f" (would be {leg} rank {rank})" if rank else ""
    if last is None:
        return f"{leg} score {_fmt(own)}{where}; the {leg} leg returned nothing"
    text = f"{leg} score {_fmt(own)}{where} vs {_fmt(last)} for the last of the leg's {size} pool candidates"
    if own > last and leg == "vector":
        text += " — above it: the approximate HNSW search missed this chunk (raise ef_search)"
    elif own == last:
        text += " — tied; lost on chunk id order"
    return text


def _describe(m: MissReason) -> str:
    if m.is_label_problem:
        return f"invalid label ({m.reason}): {m.label_detail or 'see check-dataset'}"
    if m.reason == "hit":
        text = f"rank {m.rank} <= k={m.k} (found by {m.legs} leg{'s' if m.legs == 'both' else ''})"
        if m.first_stage_rank is not None and m.first_stage_rank > m.k:
            text += f"; first-stage rank {m.first_stage_rank}: the rerank stage lifted it into the top k"
        return text
    if m.reason == "below_cutoff_after_rerank":
        return (f"rank {m.first_stage_rank} <= k={m.k} after the first stage, rank {m.rank} after the rerank stage "
                f"(rerank score {_fmt(m.rerank_score)}; final score {_fmt(m.final_score)} vs {_fmt(m.kth_score)} "
                f"at rank {m.k}, gap {_fmt(m.gap)}): the rerank stage pushed it below k")
    if m.reason == "not_in_pool":
        legs = [_leg_clause(m, leg) for leg in LEGS if leg in (m.enabled_legs or ())]
        return "not retrieved by any leg; " + ("; ".join(legs) if legs else "no score computed")
    text = f"rank {m.rank} > k={m.k}, final score {_fmt(m.final_score)}"
    if m.kth_score is not None:
        text += f" vs {_fmt(m.kth_score)} at rank {m.k} (gap {_fmt(m.gap)})"
        if m.gap == 0:
            text += " — tied; lost on the tie-break (vector score, then chunk id)"
    if m.reason in ("vector_only", "keyword_only"):
        missing = "keyword" if m.reason == "vector_only" else "vector"
        text += f"; only the {m.legs} leg found it — {_leg_clause(m, missing)}"
    return text


def _enabled_legs(candidates: Sequence, legs: Iterable[str] | None) -> tuple[str, ...]:
    return tuple(legs) if legs is not None else tuple(
        leg for leg in LEGS if any(_get(c, f"{leg}_score") is not None for c in candidates))


def legs_of(strategy) -> tuple[str, ...]:
    """The enabled legs of a strategy (candidate k > 0)."""
    return tuple(leg for leg in LEGS if getattr(strategy, f"{leg}_candidate_k"))


def classify_misses(case, candidates: Sequence, k: int | None = None,
                    label_statuses: Mapping | None = None, *, legs: Iterable[str] | None = None,
                    label_details: Mapping | None = None) -> list[MissReason]:
    """One :class:`MissReason` per relevant chunk of ``case`` (object or dict) from its ranked pool ``candidates``
    (Candidate objects or stored rows). ``label_statuses``: ``(case_id, chunk_id)`` or ``chunk_id`` → status;
    ``legs``: the enabled legs (default: those with a score in the pool; pass :func:`legs_of(strategy)`)."""
    case_id, relevant, case_k = _case(case)
    k = case_k if k is None else int(k)
    candidates = list(candidates)
    ranks = [int(r) for r in _column(candidates, "rank")]
    pool = (list(candidates) if all(a < b for a, b in zip(ranks, ranks[1:], strict=False))
            else [candidates[i] for i in sorted(range(len(ranks)), key=ranks.__getitem__)])
    by_id = {str(c): p for c, p in zip(_column(pool, "chunk_id"), pool, strict=True)}
    enabled = _enabled_legs(pool, legs)
    kth = float(_get(pool[k - 1], "final_score")) if len(pool) >= k else None
    leg_info: dict[str, Any] = {}
    for leg in LEGS:
        leg_ranks = _column(pool, f"{leg}_rank")
        members = [i for i, r in enumerate(leg_ranks) if r is not None]
        last = max(members, key=leg_ranks.__getitem__, default=None)
        leg_info[f"{leg}_leg_size"] = len(members)
        last_score = None if last is None else _get(pool[last], f"{leg}_score")  # a retriever may give ranks only
        leg_info[f"{leg}_last_score"] = None if last_score is None else float(last_score)
    leg_info["enabled_legs"], leg_info["scores_computed"] = list(enabled), False
    statuses, details = label_statuses or {}, label_details or {}
    out = []
    for chunk_id in relevant:
        status = statuses.get((case_id, chunk_id), statuses.get(chunk_id, "ok"))
        if status != "ok":
            detail = details.get((case_id, chunk_id), details.get(chunk_id))
            out.append(miss_reason(case_id=case_id, chunk_id=chunk_id, reason=status, k=k, label_detail=detail,
                                   **leg_info))
            continue
        c = by_id.get(chunk_id)
        if c is None:
            out.append(miss_reason(case_id=case_id, chunk_id=chunk_id, reason="not_in_pool", k=k, **leg_info))
            continue
        found = [leg for leg in LEGS if _get(c, f"{leg}_rank") is not None]
        found_by = "both" if len(found) == 2 else (found[0] if found else None)
        rank, final = int(_get(c, "rank")), float(_get(c, "final_score"))
        first_rank = _get(c, "first_stage_rank")
        if rank <= k:
            reason = "hit"
        elif first_rank is not None and int(first_rank) <= k:
            reason = "below_cutoff_after_rerank"
        elif len(enabled) == 2 and len(found) == 1:
            reason = f"{found[0]}_only"
        else:
            reason = "below_cutoff"
        scores = {f"{leg}_{what}": _get(c, f"{leg}_{what}") for leg in LEGS for what in ("score", "rank")}
        out.append(miss_reason(
            case_id=case_id, chunk_id=chunk_id, reason=reason, k=k, rank=rank, legs=found_by, final_score=final,
            kth_score=kth, gap=None if rank <= k or kth is None else kth - final, **scores, **leg_info,
            first_stage_rank=None if first_rank is None else int(first_rank), rerank_score=_get(c, "rerank_score")))
    return out


def summarize(reasons: Iterable[MissReason]) -> MissReasonCounts:
    """Counts per reason, the dominant non-hit reason, totals."""
    return summarize_counts(Counter(r.reason for r in reasons))


def summarize_counts(counts: Mapping[str, int]) -> MissReasonCounts:
    """:func:`summarize` from ``{reason: count}`` (a run's counts accumulated batch by batch)."""
    ordered = {reason: counts[reason] for reason in REASONS if counts.get(reason)}
    misses = {reason: n for reason, n in ordered.items() if reason != "hit"}
    dominant = max(misses, key=lambda reason: (misses[reason], -REASONS.index(reason))) if misses else None
    return MissReasonCounts(
        labels=sum(ordered.values()), counts=ordered, dominant_reason=dominant,
        dominant_count=misses[dominant] if dominant else 0,
        invalid_labels=sum(n for reason, n in ordered.items() if reason in INVALID_LABEL_REASONS))


_SENTENCES = {
    "is_document_id": "{n} of {total} labels are document ids, not chunk ids — see check-dataset",
    "is_knowledge_base_id": "{n} of {total} labels are knowledge-base ids, not chunk ids — see check-dataset",
    "unknown_id": "{n} of {total} labels match no chunk, document or knowledge base — see check-dataset",
    "not_a_uuid": "{n} of {total} labels are not UUIDs — see check-dataset",
    "other_knowledge_base": "{n} of {total} labels are chunks of another knowledge base — see check-dataset",
    "document_deleted": "{n} of {total} labels belong to deleted documents — see check-dataset",
    "document_unpublished": "{n} of {total} labels belong to unpublished documents — see check-dataset",
    "document_not_ready": "{n} of {total} labels belong to documents that are not READY — see check-dataset",
    "chunk_replaced": "{n} of {total} labels are chunks replaced by re-ingestion — check-dataset names the "
                      "current ones",
    "not_in_pool": "{n} of {total} relevant chunks never entered the candidate pool (no leg retrieved them)",
    "below_cutoff": "{n} of {total} relevant chunks are in the pool but ranked below k",
    "below_cutoff_after_rerank": "{n} of {total} relevant chunks were within k after the first stage and the "
                                 "rerank stage pushed them below k",
    "vector_only": "{n} of {total} relevant chunks are below k and were found by the vector leg only",
    "keyword_only": "{n} of {total} relevant chunks are below k and were found by the keyword leg only"}


def checklist_item(reason: str, n: int, total: int) -> str:
    """The docs/design.md §8 checklist item for ``n`` of ``total`` labels (or relevant chunks) with ``reason``."""
    return _SENTENCES[reason].format(n=n, total=total)


def first_line(summary: MissReasonCounts, averages: Mapping[str, float] | None = None) -> str | None:
    """The headline for a run whose averages are all 0 (None otherwise, or when nothing was missed)."""
    if (averages and any(float(v) != 0.0 for v in averages.values())) or summary.dominant_reason is None:
        return None
    return f"All metrics are 0: {checklist_item(summary.dominant_reason, summary.dominant_count, summary.labels)}."
