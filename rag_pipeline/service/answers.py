"""Answer operations (docs/design.md §12): score an answers file, list, read and re-score stored runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from rag_pipeline.answers.answers_file import read_answers
from rag_pipeline.answers.metrics.calibration import calibrate
from rag_pipeline.answers.metrics.official import predictions
from rag_pipeline.answers.metrics.scoring import score_answers
from rag_pipeline.answers.metrics.summary import summarise
from rag_pipeline.answers.runs import persistence
from rag_pipeline.contracts.answers import (
    ANSWER_METRIC_NAMES,
    VERDICTS,
    AnswerCaseResult,
    AnswerRecord,
    AnswerReport,
    AnswerRunList,
    AnswerScoring,
)
from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.contracts.judge import JudgeConfig, JudgeItem
from rag_pipeline.evaluation.datasets.load import Dataset
from rag_pipeline.evaluation.datasets.resolve import resolve_dataset
from rag_pipeline.evaluation.datasets.strict_json import JsonReadError, json_problems, loads_strict
from rag_pipeline.evaluation.runs.results import load_stored_dataset, store_dataset
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.knowledge_base.versions import content_version

TEXT_MODE_CONVENTIONS = {"chinese": "cmrc", "english": "squad"}
"""The answer convention a dataset without its own takes from its knowledge base's text mode (others: auto)."""
CONFIDENT_SUPPORT = 0.5
"""A wrong answer whose lexical_support reaches this (or that cites a chunk) is "wrong but confident"."""


class AnswersRequestError(BadInputError, ValueError):
    """A bad argument of an answers operation (answerer, verdict, sort)."""


def evaluate_answers(engine: sa.Engine, knowledge_base: str, dataset: str | Path, answers: str | Path | bytes, *,
                     answerer: str | None = None, scoring: AnswerScoring | None = None, store: bool = True,
                     filename: str | None = None, partition_key: str | None = None,
                     dagster_run_id: str | None = None, judge: JudgeConfig | None = None,
                     judge_progress: Callable[[int, int], None] | None = None,
                     stored_only: bool = False) -> AnswerReport:
    """Score an answers file (a path, or the bytes of an upload named ``filename``) against ``dataset`` on
    ``knowledge_base``; stored unless not ``store`` (then ``run`` is None), judged with ``judge``.
    ``stored_only``: ``dataset`` is only a stored dataset's name, never a file (what the HTTP API gives)."""
    scoring = scoring or AnswerScoring()
    ref = resolve_dataset(engine, dataset, knowledge_base=knowledge_base, source="stored" if stored_only else "any")
    kb, data = ref.kb, ref.dataset
    parsed = read_answers(answers, case_ids=[c.case_id for c in data.cases], filename=filename)
    if answerer and parsed.answerer and answerer.strip() != parsed.answerer:
        raise AnswersRequestError(f"--answerer {answerer!r} differs from the answerer the file names "
                                  f"({parsed.answerer!r}); give the same one, or none")
    name, version = persistence.answerer_identity(answerer or parsed.answerer)
    scoring = with_convention(scoring, data.answer_convention, kb.text_search)
    return _score_and_store(engine, kb, data, parsed.records, scoring, store=store, subject={
        "answerer": name, "answerer_version": version, "answers_sha256": parsed.sha256,
        "partition_key": partition_key, "dagster_run_id": dagster_run_id}, judge=judge, judge_progress=judge_progress)


def rescore_answer_run(engine: sa.Engine, run_id: str, scoring: AnswerScoring) -> AnswerReport:
    """Score run ``run_id``'s stored answers again with ``scoring``, stored as a new run naming the old one."""
    with engine.connect() as conn:
        run, row = persistence.load_run(conn, run_id)
        data = load_stored_dataset(conn, row.dataset_id)
        records = persistence.load_records(conn, run.run_id)
        kb = resolve_knowledge_base(conn, str(row.knowledge_base_id))
    scoring = with_convention(scoring, run.scoring.convention if run.scoring else None, kb.text_search)
    return _score_and_store(engine, kb, data, records, scoring, store=True, subject={
        "answerer": run.answerer, "answerer_version": run.answerer_version, "answers_sha256": run.answers_sha256,
        "rescored_from": run.run_id})


def with_convention(scoring: AnswerScoring, dataset_convention: str | None, text_mode: str) -> AnswerScoring:
    """``scoring`` with its answer convention decided: its own, else the dataset's, else the knowledge base's
    text mode's (:data:`TEXT_MODE_CONVENTIONS`, else ``auto``)."""
    if scoring.convention is not None:
        return scoring
    convention = dataset_convention or TEXT_MODE_CONVENTIONS.get(text_mode, "auto")
    return scoring.model_copy(update={"convention": convention})


def answer_predictions(engine: sa.Engine, run_id: str) -> dict[str, str]:
    """A stored run's answers in the official prediction format, ``{case id: answer}`` (a refusal ``""``)."""
    with engine.connect() as conn:
        run, _ = persistence.load_run(conn, run_id)
        return predictions(persistence.load_cases(conn, run.run_id))


def _score_and_store(engine: sa.Engine, kb, data: Dataset, records: dict[str, AnswerRecord],
                     scoring: AnswerScoring, *, store: bool, subject: dict, judge: JudgeConfig | None = None,
                     judge_progress: Callable[[int, int], None] | None = None) -> AnswerReport:
    with engine.connect() as conn:
        kb_ids, texts = persistence.scorer_chunks(conn, kb.id, records.values())
        kb_version = content_version(conn, kb.id).version if store else None
    results = score_answers(data.cases, records, kb_chunk_ids=kb_ids, chunk_text=texts, scoring=scoring)
    summary = summarise(results, cases=len(data.cases), convention=scoring.convention)
    if judge is not None:
        from rag_pipeline.answers.judge.scores import judge_summary  # noqa: PLC0415 - httpx only with a judge

        results = judge_answers(results, texts, judge, progress=judge_progress)
        summary = summary.model_copy(update={"faithfulness": judge_summary([r.judge for r in results])})
    summary = summary.model_copy(update={"calibration": calibrate(results, judged=judge is not None)})
    if not store:
        return AnswerReport(run=None, summary=summary, cases=results)
    with engine.begin() as conn:
        dataset_id = store_dataset(conn, data, kb.name)
        run_id = persistence.store_run(conn, persistence.RunSubject(
            dataset_id=str(dataset_id), knowledge_base_id=str(kb.id), knowledge_base_version=kb_version, **subject),
            scoring, results, summary, records)
        run, _ = persistence.load_run(conn, run_id)
    return AnswerReport(run=run, summary=summary, cases=results)


def judge_answers(results: list[AnswerCaseResult], chunk_text: dict[str, str], config: JudgeConfig, *,
                  progress: Callable[[int, int], None] | None = None) -> list[AnswerCaseResult]:
    """``results`` with :attr:`AnswerCaseResult.judge` filled for every answered case (docs/judge.md)."""
    from rag_pipeline.answers.judge.scores import judge_cases  # noqa: PLC0415 - httpx only with a judge

    answered = [i for i, r in enumerate(results) if r.status == "ok" and r.answer is not None]
    items = [JudgeItem(question=results[i].question, answer=results[i].answer or "",
                       cited_chunk_texts={c.chunk_id: chunk_text[c.chunk_id.strip().lower()]
                                          for c in results[i].citations if c.chunk_id.strip().lower() in chunk_text},
                       ask_refusal=results[i].refusal_source == "none") for i in answered]
    scores = dict(zip(answered, judge_cases(items, config, progress), strict=True))
    return [r.model_copy(update={"judge": scores[i]}) if i in scores else r for i, r in enumerate(results)]


def read_json_upload(raw: bytes) -> dict:
    """The body of a JSON answers upload, read strictly: any problem is an :class:`AnswersRequestError`."""
    try:
        body = loads_strict(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise AnswersRequestError(f"the request body is not UTF-8 (byte 0x{raw[exc.start]:02x} at offset "
                                  f"{exc.start})") from None
    except JsonReadError as exc:
        raise AnswersRequestError(f"the request body is not JSON we can read: {exc}") from None
    problems = json_problems(body, "$")
    if problems:
        listed = "; ".join(f"{where.removeprefix('$.').removeprefix('$') or 'the body'}: {message}"
                           for where, message in problems)
        raise AnswersRequestError(f"the request body: {listed}")
    if not isinstance(body, dict) or not isinstance(body.get("answers"), list):
        raise AnswersRequestError("the JSON body needs `dataset` and `answers` (a list of answer objects)")
    return body


def list_answer_runs(engine: sa.Engine, *, dataset: str | None = None, knowledge_base: str | None = None,
                     answerer: str | None = None, limit: int = 100, offset: int = 0) -> AnswerRunList:
    """Stored answer runs, newest first; filters: dataset name, knowledge base (name or id), answerer name."""
    if not (1 <= limit <= 10_000) or offset < 0:
        raise AnswersRequestError(f"limit must be 1 to 10000 and offset 0 or more, got {limit} and {offset}")
    with engine.connect() as conn:
        kb_id = resolve_knowledge_base(conn, knowledge_base).id if knowledge_base else None
        return persistence.list_runs(conn, dataset=dataset, knowledge_base_id=kb_id, answerer=answerer,
                                     limit=limit, offset=offset)


def get_answer_run(engine: sa.Engine, run_id: str, *, verdict: str | None = None, sort: str | None = None,
                   wrong_but_confident: bool = False) -> AnswerReport:
    """A stored run (id or unique prefix) with its cases, filtered by ``verdict`` or confidence, sorted."""
    if verdict is not None and verdict not in VERDICTS:
        raise AnswersRequestError(f"verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}")
    metric = (sort or "").removeprefix("-")
    if sort is not None and metric not in ANSWER_METRIC_NAMES:
        raise AnswersRequestError(f"sort must be an answer metric ({', '.join(ANSWER_METRIC_NAMES)}), optionally "
                                  f"with a leading '-' for descending; got {sort!r}")
    with engine.connect() as conn:
        run, _ = persistence.load_run(conn, run_id)
        cases = persistence.load_cases(conn, run.run_id, verdict=verdict)
    if wrong_but_confident:
        cases = [c for c in cases if is_wrong_but_confident(c)]
    if sort is not None:
        sign = -1.0 if sort.startswith("-") else 1.0
        scored = [c for c in cases if getattr(c.answer_metrics, metric) is not None]
        scored.sort(key=lambda c: sign * getattr(c.answer_metrics, metric))  # stable: dataset order on ties
        cases = scored + [c for c in cases if getattr(c.answer_metrics, metric) is None]
    return AnswerReport(run=run, summary=run.summary, cases=cases)


def is_wrong_but_confident(case: AnswerCaseResult) -> bool:
    """Answered, not refused, scored −1, and citing a chunk or lexically supported (docs/design.md §12.6)."""
    support = case.answer_metrics.lexical_support
    return (case.status == "ok" and not case.refused and case.answer_metrics.answer_score == -1
            and (bool(case.citations) or (support is not None and support >= CONFIDENT_SUPPORT)))
