"""The official scripts' figures of a scored run, and its predictions in their format (docs/answers.md, "Official
formats").

* SQuAD v2.0 (``evaluate-v2.0.py``, no ``--na-prob-file``): per question the exact and F1 of the answer against
  its gold answers (an unanswerable question's gold is ``""``, so only no answer scores 1); ``exact``/``f1``
  averaged over the questions with a prediction, ``HasAns``/``NoAns`` over the answerable / unanswerable ones.
  Here a refusal is the empty prediction.
* CMRC 2018 (``cmrc2018_evaluate.py``): ``EM``/``F1`` summed over the questions with a prediction and divided by
  every question (``TOTAL``; the unanswered, ``SKIP``, count 0); ``AVERAGE`` is their mean.
"""

from __future__ import annotations

from collections.abc import Sequence

from rag_pipeline.contracts.answers import AnswerCaseResult, OfficialScores


def _scorable(result: AnswerCaseResult) -> bool:
    return not result.answerable or any(r.strip() for r in result.reference_answers)


def _pair(result: AnswerCaseResult) -> tuple[float, float]:
    """(exact, f1) of one answered case as the script scores it (a refusal is the empty prediction)."""
    if not result.answerable:
        return (1.0, 1.0) if result.refused else (0.0, 0.0)
    m = result.answer_metrics
    return float(m.exact_match or 0.0), float(m.f1 or 0.0)


def _pct(values: Sequence[float], total: int) -> float | None:
    return 100.0 * sum(values) / total if total else None


def squad_scores(results: Sequence[AnswerCaseResult]) -> OfficialScores:
    """The SQuAD v2.0 script's ``exact``, ``f1``, ``total`` and its ``HasAns``/``NoAns`` split."""
    scorable = [r for r in results if _scorable(r)]
    answered = [r for r in scorable if r.status == "ok"]
    pairs = {r.case_id: _pair(r) for r in answered}
    has = [r.case_id for r in answered if r.answerable]
    no = [r.case_id for r in answered if not r.answerable]
    return OfficialScores(
        convention="squad", total=len(answered), skipped=len(scorable) - len(answered),
        not_scorable=len(results) - len(scorable),
        exact=_pct([e for e, _ in pairs.values()], len(pairs)), f1=_pct([f for _, f in pairs.values()], len(pairs)),
        has_ans_exact=_pct([pairs[c][0] for c in has], len(has)), has_ans_f1=_pct([pairs[c][1] for c in has], len(has)),
        has_ans_total=len(has), no_ans_exact=_pct([pairs[c][0] for c in no], len(no)),
        no_ans_f1=_pct([pairs[c][1] for c in no], len(no)), no_ans_total=len(no))


def cmrc_scores(results: Sequence[AnswerCaseResult]) -> OfficialScores:
    """The CMRC 2018 script's ``EM``, ``F1``, ``AVERAGE``, ``TOTAL`` and ``SKIP`` (answerable cases only: the
    script has no unanswerable question)."""
    scorable = [r for r in results if r.answerable and _scorable(r)]
    answered = [_pair(r) for r in scorable if r.status == "ok"]
    exact, f1 = _pct([e for e, _ in answered], len(scorable)), _pct([f for _, f in answered], len(scorable))
    return OfficialScores(
        convention="cmrc", exact=exact, f1=f1, total=len(scorable), skipped=len(scorable) - len(answered),
        not_scorable=len(results) - len(scorable),
        average=None if exact is None or f1 is None else (exact + f1) / 2)


def official_scores(results: Sequence[AnswerCaseResult], convention: str | None) -> OfficialScores | None:
    """The figures of ``convention``'s official script; None for ``auto`` (no single script applies)."""
    if convention == "squad":
        return squad_scores(results)
    if convention == "cmrc":
        return cmrc_scores(results)
    return None


def predictions(results: Sequence[AnswerCaseResult]) -> dict[str, str]:
    """``{case id: answer}`` in the official prediction format: a refusal is ``""`` (SQuAD v2.0's no answer); a
    case without an answer is left out (the scripts report it missing)."""
    return {r.case_id: "" if r.refused else (r.answer or "") for r in results if r.status == "ok"}
