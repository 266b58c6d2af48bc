"""``answers evaluate --output``: the report is written case by case, and the file is byte for byte the report's
``model_dump_json(indent=2)`` and a newline (what was written whole before), with or without a stored run."""

from __future__ import annotations

import json

from rag_pipeline.answers.metrics.scoring import score_answers
from rag_pipeline.answers.metrics.summary import summarise
from rag_pipeline.cli.answers.commands import report_json, write_report
from rag_pipeline.contracts.answers import AnswerRecord, AnswerReport, AnswerRun, AnswerScoring
from rag_pipeline.evaluation.datasets.load import EvaluationCase

CASES = [
    EvaluationCase("q1", "When is the coffee machine descaled?", (), 10, reference_answers=("every Friday", "Friday")),
    EvaluationCase("q2", "年假可以结转几天？", (), 10, reference_answers=("5 天",)),
    EvaluationCase("q3", "What is the CEO's salary?", (), 10, answerable=False),
    EvaluationCase("q4", "Where do I \"park\"?", (), 10, reference_answers=("in the garage\\north",)),
    EvaluationCase("q5", "Not answered", (), 10, reference_answers=("x",)),
]
RECORDS = {
    "q1": AnswerRecord(case_id="q1", answer="on Friday.\nEvery week [1]", latency_ms=12.5),
    "q2": AnswerRecord(case_id="q2", answer="可以结转 5 天。", cited_chunk_ids=["c-1"]),
    "q3": AnswerRecord(case_id="q3", answer="", refused=None),
    "q4": AnswerRecord(case_id="q4", answer="in the \"garage\"\\north\t\u2028", latency_ms=3.0),
}


def _report(stored: bool) -> AnswerReport:
    scoring = AnswerScoring(convention="auto")
    results = score_answers(CASES, RECORDS, kb_chunk_ids=set(), chunk_text={}, scoring=scoring)
    summary = summarise(results, cases=len(CASES), convention="auto")
    run = AnswerRun(run_id="00000000-0000-4000-8000-000000000001", created_at="2026-01-01T00:00:00+00:00",
                    dataset="d", dataset_version="ab" * 32, knowledge_base="kb", knowledge_base_version=None,
                    answerer="a", answerer_version="1", scoring_version="cd" * 32, answers_sha256="ef" * 32,
                    summary=summary, scoring=scoring) if stored else None
    return AnswerReport(run=run, summary=summary, cases=results)


def test_the_streamed_report_equals_the_whole_dump(tmp_path) -> None:
    for stored in (False, True):
        report = _report(stored)
        whole = report.model_dump_json(indent=2) + "\n"
        pieces = list(report_json(report))
        assert len(pieces) == len(CASES) + 2, "the head, one piece a case, the tail"
        assert "".join(pieces) == whole
        path = tmp_path / "out" / f"report-{stored}.json"
        write_report(path, report)
        assert path.read_text(encoding="utf-8") == whole
        assert [c["case_id"] for c in json.loads(whole)["cases"]] == ["q1", "q2", "q3", "q4", "q5"]


def test_a_report_without_cases_is_the_whole_dump() -> None:
    report = _report(False).model_copy(update={"cases": []})
    assert "".join(report_json(report)) == report.model_dump_json(indent=2) + "\n"
