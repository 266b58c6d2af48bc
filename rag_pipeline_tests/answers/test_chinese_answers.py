"""Correct Chinese answers are scored correct and wrong ones wrong, on a set of verbose answers written for this
test (``data/answers/chinese_verbose_answers.json``); a refusal gets no F1 through its words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rag_pipeline.answers.metrics.scoring import score_case
from rag_pipeline.answers.metrics.text_metrics import answer_contains, key_point_recall, reference_forms
from rag_pipeline.contracts.answers import AnswerRecord, AnswerScoring
from rag_pipeline.evaluation.datasets.load import EvaluationCase

DATA = Path(__file__).parent.parent / "data" / "answers" / "chinese_verbose_answers.json"
ITEMS = json.loads(DATA.read_text(encoding="utf-8"))["answers"]


def _score(item: dict, convention: str | None):
    case = EvaluationCase(item["id"], item["question"], (), 5, reference_answers=tuple(item["reference_answers"]),
                          key_points=tuple(item.get("key_points", ())))
    return score_case(case, AnswerRecord(case_id=item["id"], answer=item["answer"]), kb_chunk_ids=None,
                      chunk_text={}, scoring=AnswerScoring(convention=convention))


def test_the_set_has_both_kinds() -> None:
    assert sum(i["correct"] for i in ITEMS) >= 8 and sum(not i["correct"] for i in ITEMS) >= 8


@pytest.mark.parametrize("convention", ["cmrc", "auto"])
@pytest.mark.parametrize("item", ITEMS, ids=[i["id"] for i in ITEMS])
def test_verdicts_match_a_readers(item: dict, convention: str) -> None:
    result = _score(item, convention)
    if item["correct"]:
        assert result.verdict == "correct", f"{item['why']}: {result.verdict_reason}"
        assert result.answer_metrics.answer_score == 1.0
    else:
        assert result.verdict in ("generation_miss", "false_refusal"), f"{item['why']}: {result.verdict_reason}"
        assert result.answer_metrics.answer_score in (-1.0, 0.0)


def test_the_issue_example_and_the_cmrc_full_stop() -> None:
    tea = _score(ITEMS[0], "cmrc")
    assert tea.answer_metrics.answer_contains == 1.0 and tea.verdict_reason.startswith("correct (contains")
    hurdles = next(i for i in ITEMS if i["id"] == "hurdles")
    assert _score(hurdles, "cmrc").answer_metrics.exact_match == 1.0  # the CMRC 2018 script gives 1
    assert _score(hurdles, "squad").answer_metrics.exact_match == 0.0  # "。" is no ASCII punctuation


def test_key_points_decide_when_the_dataset_has_them() -> None:
    points = next(i for i in ITEMS if i["id"] == "rpo-rto-points")
    result = _score(points, "cmrc")
    assert result.answer_metrics.answer_contains == 0.0 and result.answer_metrics.f1 < 0.8
    assert result.verdict == "correct" and "all 2 key points found" in result.verdict_reason
    without = _score({**points, "key_points": ()}, "cmrc")
    assert without.verdict == "generation_miss"  # the same answer, judged by the reference alone
    half = _score(next(i for i in ITEMS if i["id"] == "rpo-rto-half"), "cmrc")
    assert "1 of 2 key points found" in half.verdict_reason


def test_reference_forms_drop_hedges_and_asides() -> None:
    assert reference_forms("约 30 毫克")[1:] == ["30 毫克"]
    assert "30 毫克" in reference_forms("30 毫克左右") and "4 小时" in reference_forms("4 小时（RTO）")
    assert "30 mg" in reference_forms("about 30 mg") and reference_forms("约定") == ["约定"]  # no figure: kept
    assert answer_contains("纽约的人口约 800 万", ["约 800 万"]) == 1.0
    assert answer_contains("纽约的人口约 8000 万", ["约 800 万"]) == 0.0
    assert key_point_recall("大约 30 毫克，约 2 小时", ["约 30 毫克", "2 小时左右", "3 小时"]) == pytest.approx(2 / 3)
    assert "三十岁" in reference_forms("约三十岁上下") and reference_forms("电梯上下") == ["电梯上下"]  # no figure


@pytest.mark.parametrize("convention", ["squad", "cmrc", "auto"])
def test_a_refusal_gets_no_f1_against_the_reference(convention: str) -> None:
    case = EvaluationCase("q", "Where is it?", (), 5, reference_answers=("to the north",), key_points=("north",))
    result = score_case(case, AnswerRecord(case_id="q", answer="Insufficient information to answer."),
                        kb_chunk_ids=None, chunk_text={}, scoring=AnswerScoring(convention=convention))
    m = result.answer_metrics
    assert result.refused and (m.exact_match, m.f1, m.answer_contains, m.key_point_recall) == (0.0, 0.0, 0.0, 0.0)
    assert result.verdict == "false_refusal" and m.answer_score == 0.0


def test_under_squad_an_answer_that_normalises_to_nothing_is_a_refusal() -> None:
    answerable = EvaluationCase("q", "Who?", (), 5, reference_answers=("Paris",))
    unanswerable = EvaluationCase("u", "Who?", (), 5, answerable=False)
    for case, verdict in ((answerable, "false_refusal"), (unanswerable, "correct")):
        for text in ("", " . ", "The"):
            squad = score_case(case, AnswerRecord(case_id=case.case_id, answer=text), kb_chunk_ids=None,
                               chunk_text={}, scoring=AnswerScoring(convention="squad"))
            assert (squad.refused, squad.refusal_source, squad.verdict) == (True, "empty", verdict)
            cmrc = score_case(case, AnswerRecord(case_id=case.case_id, answer=text), kb_chunk_ids=None,
                              chunk_text={}, scoring=AnswerScoring(convention="cmrc"))
            assert not cmrc.refused  # CMRC 2018 has no "no answer"
    flagged = score_case(answerable, AnswerRecord(case_id="q", answer="", refused=False), kb_chunk_ids=None,
                         chunk_text={}, scoring=AnswerScoring(convention="squad"))
    assert not flagged.refused and flagged.refusal_source == "flag"  # the system's own flag wins
