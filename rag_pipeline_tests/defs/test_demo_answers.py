"""``make run`` prints the answer figures of the baseline answerer after the retrieval table: the figures of a
real scoring of demo answers (no database: the scorer and the summary are pure)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rag_pipeline.analysis.comparison import StrategyRun, compare
from rag_pipeline.answers.metrics.scoring import score_answers
from rag_pipeline.answers.metrics.summary import summarise
from rag_pipeline.contracts.answers import AnswerRecord, AnswerRun, AnswerScoring
from rag_pipeline.defs.demo import answer_figures, demo_summary
from rag_pipeline.evaluation.datasets.load import load_dataset

ROOT = Path(__file__).resolve().parents[2]


def _run() -> AnswerRun:
    data = load_dataset(ROOT / "datasets" / "demo.json")
    answerable = [c for c in data.cases if c.answerable and c.reference_answers]
    unanswerable = [c for c in data.cases if not c.answerable]
    records = {c.case_id: AnswerRecord(case_id=c.case_id, answer=c.reference_answers[0],
                                       cited_chunk_ids=list(c.relevant_chunk_ids)[:1]) for c in answerable[:10]}
    records[answerable[10].case_id] = AnswerRecord(case_id=answerable[10].case_id, answer="信息不足")
    records.update({c.case_id: AnswerRecord(case_id=c.case_id, answer="I don't know.") for c in unanswerable[:2]})
    results = score_answers(data.cases, records, kb_chunk_ids=None, chunk_text={}, scoring=AnswerScoring())
    summary = summarise(results, cases=len(data.cases))
    return AnswerRun(run_id="0123abcd-0000-0000-0000-000000000000", created_at="2026-01-01T00:00:00Z",
                     dataset="demo", dataset_version="v", knowledge_base="demo", knowledge_base_version=None,
                     answerer="extractive-v1", answerer_version="feedbeef00001111", scoring_version="s",
                     answers_sha256="x", summary=summary)


def test_the_answer_figures_are_printed_after_the_retrieval_table() -> None:
    run = _run()
    s = run.summary
    text = answer_figures(run)
    assert text.startswith(f"Answers of extractive-v1@feedbeef0000 on demo: 13/{s.cases} cases answered "
                           f"({s.unanswerable_cases} unanswerable), answer run 0123abcd")
    rows = {line.split("  ")[1].strip(): line for line in text.splitlines()[3:-1]}
    for label, mean in (("EM", s.metrics["exact_match"].mean), ("F1", s.metrics["f1"].mean),
                        ("citation P", s.metrics["citation_precision"].mean),
                        ("citation R", s.metrics["citation_recall"].mean),
                        ("refusal recall", s.refusal_recall.mean),
                        ("false refusal rate", s.false_refusal_rate.mean),
                        ("answer_score", s.metrics["answer_score"].mean)):
        assert mean is not None and f"{mean:.3f}" in rows[label], label
    assert s.refusal_recall.mean == 1.0 and s.false_refusal_rate.mean == 1 / 11
    assert s.metrics["exact_match"].mean == 10 / 11 and s.metrics["exact_match"].n_scored == 11
    verdicts = text.splitlines()[-1]
    assert verdicts.startswith("  verdicts: correct ") and f"correct {s.verdicts['correct']}," in verdicts
    assert f"false_refusal {s.verdicts['false_refusal']}" in verdicts and s.verdicts["false_refusal"] == 1
    shuffled = run.model_copy(update={"summary": s.model_copy(update={"verdicts": dict(reversed(s.verdicts.items()))})})
    assert answer_figures(shuffled) == text, "verdicts in the documented order, whatever the stored order"

    base = np.linspace(0.5, 1.0, 6)
    comp = compare([StrategyRun("hybrid-v1", "aaaabbbb-0000-0000-0000-000000000000",
                                {f"c{i}": {m: float(v) for m in ("precision_at_k", "recall_at_k", "reciprocal_rank",
                                                                    "ndcg_at_k")} for i, v in enumerate(base)})],
                   dataset="demo", n_resamples=100)
    full = demo_summary(comp, [], answers=run)
    assert full.index("hybrid-v1") < full.index("Answers of extractive-v1") < full.index("Next:")
    assert "Answers of" not in demo_summary(comp, []), "no answer run: no answer figures"
