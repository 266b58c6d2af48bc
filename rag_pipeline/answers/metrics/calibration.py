"""The automatic answer verdicts against people's (docs/answers.md, "Human verdicts"): for each figure, Cohen's κ,
the confusion matrix, base rates and n over the answers both decided, or "not calibrated" with the reason."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rag_pipeline.contracts.answers import AnswerCaseResult, FigureCalibration

FAITHFUL_AT = 1.0
"""A judged answer counts as faithful when its faithfulness reaches this: every claim supported."""
_CORRECT = ("correct", "citation_miss")


def _correct(r: AnswerCaseResult) -> bool | None:
    return None if r.status != "ok" or r.verdict == "unscored" else r.verdict in _CORRECT


def _faithful(r: AnswerCaseResult) -> bool | None:
    value = r.judge.faithfulness if r.judge is not None else None
    return None if value is None else value >= FAITHFUL_AT


def _refusal_right(r: AnswerCaseResult) -> bool | None:
    return None if r.status != "ok" else r.refused != r.answerable


FIGURES: dict[str, tuple[str, Callable[[AnswerCaseResult], bool | None]]] = {
    "correct": ("rules", _correct),
    "faithful": ("judge", _faithful),
    "refusal_right": ("flag/phrases/judge", _refusal_right),
}


def calibrate(results: Sequence[AnswerCaseResult], *, judged: bool) -> list[FigureCalibration]:
    """Every figure a person gave a verdict on somewhere in ``results``, and (``judged``: the judge ran) every
    judge figure whether or not people judged it."""
    out = []
    for figure, (decided_by, machine) in FIGURES.items():
        people = {r.case_id: getattr(r.human, figure) for r in results
                  if r.human is not None and getattr(r.human, figure) is not None}
        if not people and not (judged and decided_by == "judge"):
            continue
        pairs = [(people[r.case_id], value) for r in results
                 if r.case_id in people and (value := machine(r)) is not None]
        if not pairs:
            reason = (f"no human verdict '{figure}' in the answers file" if not people
                      else f"no answer has both a human verdict '{figure}' and a {decided_by} value")
            out.append(FigureCalibration(figure=figure, decided_by=decided_by, calibrated=False,
                                         reason=f"not calibrated: {reason}"))
            continue
        from rag_pipeline.evaluation.agreement import two_raters  # noqa: PLC0415 - numpy only for human verdicts

        agreement = two_raters("people", decided_by, [p for p, _ in pairs], [m for _, m in pairs],
                               [False, True], [True])
        out.append(FigureCalibration(figure=figure, decided_by=decided_by, calibrated=True,
                                     agreement=agreement))
    return out
