"""Why an answer failed: one verdict per case with a reason (first match wins: docs/design.md §12.5)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from rag_pipeline.contracts.answers import Verdict


@dataclass(frozen=True)
class VerdictInput:
    """What a verdict is decided from (the scoring fills it from the case, the record and its metrics)."""

    has_answer: bool
    status: str
    answerable: bool
    has_references: bool
    refused: bool
    correct: bool
    correct_because: str
    relevant: Collection[str]
    cited: Sequence[str] | None
    retrieved: Sequence[str] | None
    error: str | None = None


def is_correct(exact_match: float | None, f1: float | None, contains: float | None, *,
               threshold: float) -> tuple[bool, str]:
    """An answer is correct when its exact match is 1, or a reference is contained in it (verbose correct
    answers are common), or its F1 is at least ``threshold``; ``(correct, why)``."""
    if exact_match == 1.0:
        return True, "exact match"
    if contains == 1.0:
        return True, "contains a reference answer"
    if f1 is not None and f1 >= threshold:
        return True, f"f1 {f1:.2f} >= {threshold:g}"
    return False, f"f1 {f1:.2f} < {threshold:g}, no exact match" if f1 is not None else "no text score"


def _wrong(v: VerdictInput, why: str) -> tuple[Verdict, str]:
    relevant = set(v.relevant)
    if not relevant:
        return "generation_miss", f"wrong answer ({why}); no relevant chunk labels to tell a retrieval miss"
    if v.retrieved is not None:
        hits = [c for c in v.retrieved if c in relevant]
        if hits:
            return "generation_miss", f"wrong answer ({why}) although {len(hits)} relevant chunk(s) were retrieved"
        return "retrieval_miss", f"wrong answer; none of the {len(v.retrieved)} retrieved chunks is relevant"
    if v.cited:
        if any(c in relevant for c in v.cited):
            return "generation_miss", f"wrong answer ({why}) although it cites a relevant chunk"
        return "retrieval_miss", ("wrong answer; none of its cited chunks is relevant (no retrieved ids sent: "
                                  "judged from the citations)")
    return "generation_miss", (f"wrong answer ({why}); no retrieved or cited ids sent, a retrieval miss cannot "
                               "be told apart")


def decide_verdict(v: VerdictInput) -> tuple[Verdict, str]:
    """The case's verdict and its one-line reason, by the rules of this module's docstring."""
    if not v.has_answer:
        return "unscored", (f"no answer (error: {v.error})" if v.status == "error" and v.error
                            else f"no answer ({v.status})")
    if not v.answerable:
        if v.refused:
            return "correct", "refused an unanswerable case"
        return "answered_unanswerable", "answered a case the knowledge base cannot answer"
    if not v.has_references:
        return "unscored", "no reference answer"
    if v.refused:
        return "false_refusal", "refused an answerable case"
    if v.correct:
        if not v.cited:
            return "correct", f"correct ({v.correct_because}), no citations given"
        if not v.relevant:
            return "correct", f"correct ({v.correct_because}), no relevant labels to check its citations"
        relevant = set(v.relevant)
        if any(c in relevant for c in v.cited):
            return "correct", f"correct ({v.correct_because}) and cites a relevant chunk"
        return "citation_miss", (f"correct ({v.correct_because}), but none of its {len(v.cited)} citations is a "
                                 "relevant chunk")
    return _wrong(v, v.correct_because)
