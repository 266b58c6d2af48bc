"""Score one case's answer record against its labelled case: metrics, citations, refusal, verdict, answer_score
(docs/design.md §12.3–§12.5). Pure: no database; the caller passes the knowledge base's chunk ids and the text of
the cited chunks."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from rag_pipeline.answers.metrics import citation_metrics as cm
from rag_pipeline.answers.metrics.refusal import is_refusal
from rag_pipeline.answers.metrics.text_metrics import (
    answer_contains,
    exact_match,
    f1,
    key_point_recall,
    squad_normalize,
)
from rag_pipeline.answers.metrics.verdicts import VerdictInput, decide_verdict, is_correct
from rag_pipeline.contracts.answers import (
    ANSWER_METRIC_NAMES,
    AnswerCaseResult,
    AnswerMetrics,
    AnswerRecord,
    AnswerScoring,
)
from rag_pipeline.evaluation.datasets.load import EvaluationCase

NO_ANSWER = "no answer"
UNANSWERABLE = "unanswerable case"
NO_REFERENCE = "no reference answer"


def _answer_score(case: EvaluationCase, refused: bool, correct: bool, has_references: bool) -> tuple[float | None,
                                                                                                      str | None]:
    """CRAG-style: +1 correct (or a refusal of an unanswerable case), 0 a refusal of an answerable case, −1
    otherwise; undefined for an answerable case without reference answers."""
    if not case.answerable:
        return (1.0 if refused else -1.0), None
    if not has_references:
        return None, NO_REFERENCE
    if refused:
        return 0.0, None
    return (1.0 if correct else -1.0), None


def _unanswered(case: EvaluationCase, record: AnswerRecord | None, relevant: list[str]) -> AnswerCaseResult:
    status = "missing" if record is None else "error"
    error = None if record is None else (record.error or "status error without a message")
    verdict, reason = decide_verdict(VerdictInput(
        has_answer=False, status=status, answerable=case.answerable, has_references=bool(case.reference_answers),
        refused=False, correct=False, correct_because="", relevant=relevant, cited=None, retrieved=None,
        error=error))
    return AnswerCaseResult(
        case_id=case.case_id, question=case.question, answer=None, status=status, error=error,
        reference_answers=list(case.reference_answers), key_points=list(case.key_points),
        answerable=case.answerable, refused=False, refusal_source="none", verdict=verdict, verdict_reason=reason,
        answer_metrics=AnswerMetrics(), skipped=dict.fromkeys(ANSWER_METRIC_NAMES, NO_ANSWER),
        relevant_chunk_ids=relevant, latency_ms=None if record is None else record.latency_ms,
        human=None if record is None else record.human)


def score_case(case: EvaluationCase, record: AnswerRecord | None, *, kb_chunk_ids: Collection[str] | None,
               chunk_text: Mapping[str, str], scoring: AnswerScoring) -> AnswerCaseResult:
    """One case's :class:`AnswerCaseResult`; ids of ``chunk_text`` and ``kb_chunk_ids`` are lower-case."""
    relevant = [cm.normalise_id(c) for c in case.relevant_chunk_ids]
    if record is None or record.status == "error":
        return _unanswered(case, record, relevant)
    values: dict[str, float | None] = {}
    skipped: dict[str, str] = {}

    def put(name: str, scored: tuple[float | None, str | None]) -> None:
        values[name] = scored[0]
        if scored[0] is None:
            skipped[name] = scored[1] or "undefined"

    answer = record.answer
    references = [r for r in case.reference_answers if r.strip()]
    refused, source = is_refusal(record, scoring.refusal_phrases)
    if scoring.convention == "squad" and record.refused is None and not squad_normalize(answer):
        refused, source = True, "empty"  # the official SQuAD v2.0 script's "no answer"
    scored_text = "" if refused else answer  # a refusal is scored as no answer: no F1 through its words
    convention = scoring.convention
    for name, value in (("exact_match", lambda: exact_match(scored_text, references, convention)),
                        ("f1", lambda: f1(scored_text, references, convention)),
                        ("answer_contains", lambda: answer_contains(scored_text, references))):
        if not case.answerable:
            put(name, (None, UNANSWERABLE))
        elif not references:
            put(name, (None, NO_REFERENCE))
        else:
            put(name, (value(), None))
    key_points = [k for k in case.key_points if k.strip()]
    put("key_point_recall", (key_point_recall(scored_text, key_points), None) if key_points and case.answerable
        else (None, UNANSWERABLE if not case.answerable else "no key points"))

    grades = {cm.normalise_id(k): g for k, g in case.grades.items()}
    citations = cm.build_citations(record.cited_chunk_ids, grades=grades, retrieved=record.retrieved_chunk_ids,
                                   kb_chunk_ids=kb_chunk_ids)
    put("citation_precision", cm.citation_precision(citations, relevant))
    put("citation_recall", cm.citation_recall(citations, relevant, sent=record.cited_chunk_ids is not None))
    put("citation_validity", cm.citation_validity(citations, retrieved_sent=record.retrieved_chunk_ids is not None,
                                                  kb_known=kb_chunk_ids is not None))
    put("sentence_citation_coverage", cm.sentence_citation_coverage(answer))
    put("lexical_support", cm.lexical_support(answer, record.cited_chunk_ids, chunk_text,
                                              ngram=scoring.support_ngram, threshold=scoring.support_threshold))

    correct, because = is_correct(values["exact_match"], values["f1"], values["answer_contains"],
                                  threshold=scoring.f1_correct_threshold, key_points=values["key_point_recall"],
                                  n_key_points=len(key_points))
    put("answer_score", _answer_score(case, refused, correct, bool(references)))
    retrieved = None if record.retrieved_chunk_ids is None else [cm.normalise_id(c)
                                                                 for c in record.retrieved_chunk_ids]
    verdict, reason = decide_verdict(VerdictInput(
        has_answer=True, status="ok", answerable=case.answerable, has_references=bool(references),
        refused=refused, correct=correct, correct_because=because, relevant=relevant,
        cited=None if record.cited_chunk_ids is None else [c.chunk_id for c in citations], retrieved=retrieved))
    return AnswerCaseResult(
        case_id=case.case_id, question=case.question, answer=answer, status="ok",
        reference_answers=list(case.reference_answers), key_points=list(case.key_points),
        answerable=case.answerable, refused=refused, refusal_source=source, verdict=verdict,
        verdict_reason=reason, answer_metrics=AnswerMetrics(**values, refused=refused), skipped=skipped,
        citations=citations, relevant_chunk_ids=relevant, retrieved_chunk_ids=retrieved,
        latency_ms=record.latency_ms, human=record.human)


def score_answers(cases: Iterable[EvaluationCase], records_by_id: Mapping[str, AnswerRecord], *,
                  kb_chunk_ids: Collection[str] | None, chunk_text: Mapping[str, str],
                  scoring: AnswerScoring) -> list[AnswerCaseResult]:
    """Every case's result in dataset order (no record: missing); a record of an unknown case: ``ValueError``."""
    cases = list(cases)
    unknown = sorted(set(records_by_id) - {c.case_id for c in cases})
    if unknown:
        raise ValueError(f"answers for case ids not in the dataset: {', '.join(map(repr, unknown[:10]))}")
    kb = None if kb_chunk_ids is None else frozenset(cm.normalise_id(c) for c in kb_chunk_ids)
    texts = {cm.normalise_id(k): v for k, v in chunk_text.items()}
    return [score_case(c, records_by_id.get(c.case_id), kb_chunk_ids=kb, chunk_text=texts, scoring=scoring)
            for c in cases]
