"""Refusal, verdict precedence, per-case scoring and the run summary (no NaN, reasons counted)."""

from __future__ import annotations

import json
import math

import pytest

from rag_pipeline.answers.metrics.refusal import DEFAULT_REFUSAL_PHRASES, is_refusal
from rag_pipeline.answers.metrics.scoring import score_answers, score_case
from rag_pipeline.answers.metrics.summary import summarise
from rag_pipeline.contracts.answers import ANSWER_METRIC_NAMES, VERDICTS, AnswerRecord, AnswerScoring
from rag_pipeline.evaluation.datasets.load import EvaluationCase

A = "0b9f3a52-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
B = "1c9f3a52-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
C = "2d9f3a52-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
SCORING = AnswerScoring()
TEXT = {A: "Paris is the capital of France.", B: "Lyon is a city in France.", C: "北京是中国的首都。"}


def _case(case_id="q1", relevant=(A,), refs=("Paris",), answerable=True, key_points=()):
    return EvaluationCase(case_id, "What is the capital of France?", tuple(relevant), 5, reference_answers=refs,
                          answerable=answerable, key_points=key_points)


def _score(case, **record):
    rec = AnswerRecord(case_id=case.case_id, **record) if record else None
    return score_case(case, rec, kb_chunk_ids={A, B, C}, chunk_text=TEXT, scoring=SCORING)


def test_refusal_flag_wins_over_phrases() -> None:
    assert is_refusal(AnswerRecord(case_id="x", answer="I don’t know.")) == (True, "phrase")  # curly quote
    assert is_refusal(AnswerRecord(case_id="x", answer="资料显示：信息不足。")) == (True, "phrase")
    assert is_refusal(AnswerRecord(case_id="x", answer="I DON'T KNOW", refused=False)) == (False, "flag")
    assert is_refusal(AnswerRecord(case_id="x", answer="Paris", refused=True)) == (True, "flag")
    assert is_refusal(AnswerRecord(case_id="x", answer="Paris")) == (False, "none")
    assert is_refusal(AnswerRecord(case_id="x", answer="Paris"), ["paris"]) == (True, "phrase")
    assert "信息不足" in DEFAULT_REFUSAL_PHRASES and "insufficient information" in DEFAULT_REFUSAL_PHRASES


@pytest.mark.parametrize(("case", "record", "verdict"), [
    (_case(), None, "unscored"),
    (_case(), {"answer": "Paris", "status": "error", "error": "timeout"}, "unscored"),
    (_case(answerable=False, relevant=(), refs=()), {"answer": "信息不足"}, "correct"),
    (_case(answerable=False, relevant=(), refs=()), {"answer": "Paris", "refused": False}, "answered_unanswerable"),
    (_case(refs=()), {"answer": "I don't know"}, "unscored"),  # no reference beats the refusal
    (_case(), {"answer": "Paris, I don't know", "cited_chunk_ids": [A]}, "false_refusal"),  # refusal beats correct
    (_case(), {"answer": "The capital is Paris.", "cited_chunk_ids": [A]}, "correct"),
    (_case(), {"answer": "The capital is Paris."}, "correct"),  # no citations at all
    (_case(), {"answer": "Paris", "cited_chunk_ids": [B]}, "citation_miss"),
    (_case(relevant=()), {"answer": "Paris", "cited_chunk_ids": [B]}, "correct"),  # no labels to check citations
    (_case(), {"answer": "Lyon", "retrieved_chunk_ids": [B, C]}, "retrieval_miss"),
    (_case(), {"answer": "Lyon", "retrieved_chunk_ids": [B, A.upper()]}, "generation_miss"),
    (_case(), {"answer": "Lyon", "cited_chunk_ids": [A]}, "generation_miss"),
    (_case(), {"answer": "Lyon", "cited_chunk_ids": [B]}, "retrieval_miss"),  # judged from citations
    (_case(), {"answer": "Lyon"}, "generation_miss"),  # nothing tells a retrieval miss apart
    (_case(relevant=()), {"answer": "Lyon", "retrieved_chunk_ids": [B]}, "generation_miss"),
])
def test_verdict_precedence(case, record, verdict) -> None:
    result = _score(case, **record) if record else _score(case)
    assert result.verdict == verdict, result.verdict_reason
    assert result.verdict_reason and "\n" not in result.verdict_reason


def test_correct_by_exact_match_contains_or_f1_threshold() -> None:
    verbose = _score(_case(refs=("Denver Broncos",)), answer="It was the Denver Broncos who won.")
    assert verbose.answer_metrics.answer_contains == 1.0 and verbose.answer_metrics.f1 < 0.8
    assert verbose.verdict == "correct" and verbose.answer_metrics.answer_score == 1.0
    close = _score(_case(refs=("the Denver Broncos team",)), answer="Denver Broncos")  # f1 0.8, not contained
    assert close.answer_metrics.f1 == pytest.approx(0.8) and close.answer_metrics.answer_contains == 0.0
    assert close.verdict == "correct"
    wrong = _score(_case(refs=("the Denver Broncos team",)), answer="Broncos")
    assert wrong.answer_metrics.f1 < 0.8 and wrong.answer_metrics.answer_score == -1.0


def test_answer_score_crag_style() -> None:
    unanswerable = _case(answerable=False, relevant=(), refs=())
    assert _score(unanswerable, answer="x", refused=True).answer_metrics.answer_score == 1.0
    assert _score(unanswerable, answer="Paris").answer_metrics.answer_score == -1.0
    assert _score(_case(), answer="信息不足").answer_metrics.answer_score == 0.0
    no_ref = _score(_case(refs=()), answer="Paris")
    assert no_ref.answer_metrics.answer_score is None and no_ref.skipped["answer_score"] == "no reference answer"


def test_unanswerable_and_missing_cases_have_reasons() -> None:
    result = _score(_case(answerable=False, relevant=(), refs=()), answer="Paris [1].", cited_chunk_ids=[A])
    for name in ("exact_match", "f1", "answer_contains", "key_point_recall"):
        assert getattr(result.answer_metrics, name) is None and result.skipped[name] == "unanswerable case"
    assert result.skipped["citation_precision"] == "no relevant chunks"
    assert result.answer_metrics.citation_validity == 1.0  # validity needs no labels
    missing = _score(_case())
    assert missing.status == "missing" and missing.answer is None
    assert missing.skipped == dict.fromkeys(ANSWER_METRIC_NAMES, "no answer")


def test_scored_case_metrics_and_citations() -> None:
    case = _case(relevant=(A, C), refs=("Paris",), key_points=("Paris", "France", "Seine"))
    result = _score(case, answer="Paris is the capital of France [1]. It is on the Seine [2].",
                    cited_chunk_ids=[A, "not-a-chunk"], retrieved_chunk_ids=[A, B], latency_ms=12.5)
    m = result.answer_metrics
    assert (m.exact_match, m.answer_contains, m.key_point_recall) == (0.0, 1.0, 1.0)
    assert (m.citation_precision, m.citation_recall, m.citation_validity) == (0.5, 0.5, 0.5)
    assert m.sentence_citation_coverage == 1.0
    assert m.lexical_support == 0.5  # the second sentence cites a non-chunk id: no text
    assert [c.chunk_id for c in result.citations] == [A, "not-a-chunk"]
    assert result.verdict == "correct" and result.refusal_source == "none"


def test_unknown_record_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="'ghost'"):
        score_answers([_case()], {"ghost": AnswerRecord(case_id="ghost", answer="x")}, kb_chunk_ids=None,
                      chunk_text={}, scoring=SCORING)


def test_summary_counts_and_never_nan() -> None:
    cases = [_case("q1"), _case("q2"), _case("q3", answerable=False, relevant=(), refs=()),
             _case("q4", answerable=False, relevant=(), refs=())]
    records = {"q1": AnswerRecord(case_id="q1", answer="Paris", latency_ms=10.0),
               "q2": AnswerRecord(case_id="q2", answer="信息不足", latency_ms=30.0),
               "q3": AnswerRecord(case_id="q3", answer="I don't know"),
               "q4": AnswerRecord(case_id="q4", answer="", status="error", error="HTTP 500")}
    results = score_answers(cases, records, kb_chunk_ids=None, chunk_text={}, scoring=SCORING)
    summary = summarise(results, cases=5)
    assert (summary.answered, summary.missing, summary.errors, summary.coverage) == (3, 2, 1, 0.6)
    assert summary.missing_case_ids == ["q4"]
    assert summary.metrics["exact_match"].mean == 0.5 and summary.metrics["exact_match"].n_scored == 2
    assert summary.metrics["exact_match"].skip_reasons == {"no answer": 1, "unanswerable case": 1}
    assert summary.metrics["answer_score"].mean == pytest.approx((1 + 0 + 1) / 3)
    assert summary.refusal_recall.mean == 1.0 and summary.refusal_recall.skip_reasons == {"no answer": 1}
    assert summary.false_refusal_rate.mean == 0.5 and summary.false_refusal_rate.n_scored == 2
    assert set(summary.verdicts) == set(VERDICTS) and summary.verdicts["false_refusal"] == 1
    assert (summary.latency_ms_p50, summary.latency_ms_p95) == (20.0, 29.0)


def test_summary_with_every_metric_skipped_has_no_nan() -> None:
    results = score_answers([_case("q1"), _case("q2")], {}, kb_chunk_ids=None, chunk_text={}, scoring=SCORING)
    summary = summarise(results, cases=2)
    text = summary.model_dump_json()
    assert "NaN" not in text and "Infinity" not in text
    for name in ANSWER_METRIC_NAMES:
        figure = summary.metrics[name]
        assert (figure.mean, figure.n_scored, figure.n_skipped) == (None, 0, 2)
    assert summary.refusal_recall.mean is None and summary.false_refusal_rate.mean is None
    assert summary.coverage == 0.0 and summary.latency_ms_p50 is None
    assert not any(isinstance(v, float) and math.isnan(v) for v in json.loads(text)["metrics"]["f1"].values())
    with pytest.raises(ValueError, match="at least"):
        summarise(results, cases=1)
