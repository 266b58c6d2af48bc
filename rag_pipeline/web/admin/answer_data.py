"""What the console's answer pages read beyond a run (docs/design.md §12.6), composed of service calls only."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from rag_pipeline.contracts.answers import ANSWER_METRIC_NAMES, AnswerCaseDetail, AnswerRun
from rag_pipeline.contracts.errors import NotFoundError
from rag_pipeline.contracts.runs import HistoryPoint
from rag_pipeline.service import evaluations, history
from rag_pipeline.service.analysis import DEFAULT_BASELINE
from rag_pipeline.service.answers import get_answer_run, list_answer_runs

MAX_HISTORY_RUNS = 500


class AnswerCaseNotFoundError(NotFoundError, LookupError):
    """The answer run has no case of that id."""


def get_answer_case(engine: sa.Engine, run_id: str, case_id: str) -> AnswerCaseDetail:
    """A case of an answer run with its cited chunks' text, its neighbours and a retrieval run to link."""
    report = get_answer_run(engine, run_id)
    run = report.stored_run
    ids = [c.case_id for c in report.cases]
    if case_id not in ids:
        raise AnswerCaseNotFoundError(f"answer run {run.run_id[:8]} has no case {case_id[:200]!r}")
    index = ids.index(case_id)
    case = report.cases[index]
    texts = history.chunk_texts(engine, [c.chunk_id for c in case.citations])
    retrieval = _retrieval_run(engine, run)
    return AnswerCaseDetail(
        run=run, case=case, cited_chunks=texts,
        previous_case_id=ids[index - 1] if index > 0 else None,
        next_case_id=ids[index + 1] if index + 1 < len(ids) else None,
        retrieval_run_id=retrieval.run_id if retrieval else None,
        retrieval_strategy=retrieval.strategy_version if retrieval else None)


def _retrieval_run(engine: sa.Engine, run: AnswerRun):
    """A succeeded retrieval run of the answer run's dataset version: the baseline's current one, else the newest."""
    runs = [s for s in evaluations.run_page(engine, knowledge_base=run.knowledge_base, dataset=run.dataset,
                                            status="succeeded", limit=200)[1]
            if s.dataset.version == run.dataset_version]
    runs.sort(key=lambda s: (not (s.is_current and s.strategy_version == DEFAULT_BASELINE), not s.is_current))
    return runs[0] if runs else None  # sort is stable: newest first within each group


def answer_history(engine: sa.Engine, dataset: str, knowledge_base: str) -> list[HistoryPoint]:
    """Every answer run of ``dataset`` as a chart point, a line per answerer; ``is_current`` marks the newest."""
    runs = list_answer_runs(engine, dataset=dataset, knowledge_base=knowledge_base, limit=MAX_HISTORY_RUNS).runs
    seen: set[str] = set()
    points = []
    for run in runs:  # newest first
        who = f"{run.answerer}@{run.answerer_version}"
        s = run.summary
        means = {m: v.mean for m, v in s.metrics.items() if m in ANSWER_METRIC_NAMES and v.mean is not None}
        figures = {"refusal_recall": s.refusal_recall.mean, "false_refusal_rate": s.false_refusal_rate.mean,
                   "coverage": s.coverage}
        means |= {k: v for k, v in figures.items() if v is not None}
        points.append(HistoryPoint(run_id=run.run_id, strategy_version=who, dataset_version=run.dataset_version,
                                   is_current=who not in seen, finished_at=dt.datetime.fromisoformat(run.created_at),
                                   case_count=s.cases, metrics=means))
        seen.add(who)
    return points
