"""Evaluation operations: run strategies over a dataset, list and read stored runs, write reports."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import sqlalchemy as sa

from rag_pipeline.contracts.errors import BadInputError, CheckFailed
from rag_pipeline.contracts.label_check import LabelReport
from rag_pipeline.contracts.reports import REPORT_VERSION, RunDetail, RunTables
from rag_pipeline.contracts.runs import RescoredRun, RunSummary
from rag_pipeline.evaluation.click import ClickRun, evaluate_click
from rag_pipeline.evaluation.datasets.label_check import check_labels
from rag_pipeline.evaluation.datasets.resolve import DatasetRef, resolve_dataset
from rag_pipeline.evaluation.diagnosis.miss_reasons import checklist_item
from rag_pipeline.evaluation.evaluate import BATCH_SIZE, EvaluationOutcome, Progress
from rag_pipeline.evaluation.runs import case_queries, reports
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.evaluation.runs.queries import count_runs, summary_of
from rag_pipeline.evaluation.runs.rescore import rescore_run
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.retrieval.strategies import Strategy, get_strategy, load_registry
from rag_pipeline.service.applicability import require_runnable

DEFAULT_STRATEGY = "hybrid-v1"


class LabelsRefused(BadInputError, ValueError):  # noqa: N818 - like CheckFailed, a verdict the user is shown
    """No label of the dataset is a searchable chunk of its knowledge base: a run would measure nothing."""


@dataclass(frozen=True)
class EvaluationPlan:
    """A resolved dataset and the strategies to run on it (nothing written yet)."""

    dataset: DatasetRef
    strategies: tuple[Strategy, ...]


def plan_evaluation(engine: sa.Engine | Callable[[], sa.Engine], dataset: str | Path,
                    strategies: Sequence[str] = (DEFAULT_STRATEGY,), *,
                    knowledge_base: str | None = None) -> EvaluationPlan:
    """Validate the strategy versions and the whole dataset file (before ``engine`` is used), then resolve its
    knowledge base (``knowledge_base``, a name or id: needed for a bare-array file, else it must agree)."""
    registry = load_registry()
    chosen = tuple(get_strategy(v, registry) for v in dict.fromkeys(strategies))
    return EvaluationPlan(resolve_dataset(engine, dataset, knowledge_base=knowledge_base, source="file"), chosen)


def label_rule(report: LabelReport, *, strict: bool = False) -> str:
    """Can a dataset with this label report run (docs/design.md §8): ``"refuse"`` when no label is a searchable
    chunk, or with ``strict`` when any is invalid; ``"warn"`` when some are invalid; ``"ok"``. The one rule."""
    invalid = report.invalid()
    if not invalid:
        return "ok"
    return "refuse" if strict or len(invalid) == len(report.rows) else "warn"


def check_labels_first(engine: sa.Engine, ref: DatasetRef, *, strict: bool = False) -> LabelReport:
    """The label check every run starts with (docs/design.md §8), decided by :func:`label_rule`. No valid label
    at all → :class:`LabelsRefused` (nothing would be measured); with ``strict``, any invalid label →
    :class:`CheckFailed`. Otherwise the report, whose :func:`label_headline` a front end shows first."""
    with engine.connect() as conn:
        report = check_labels(conn, ref.kb, ref.dataset.cases)
    if label_rule(report) == "refuse":
        raise LabelsRefused(f"dataset {ref.dataset.name!r}: no label is a searchable chunk of knowledge base "
                            f"{ref.kb.name!r}, so every metric would be 0 — {_checklist(report)}; "
                            "nothing was run (rag-pipeline check-dataset lists every label with its fix)")
    if label_rule(report, strict=strict) == "refuse":
        raise CheckFailed(f"--strict: {label_headline(report)}; nothing was run")
    return report


def label_headline(report: LabelReport, *, example: bool = True) -> str | None:
    """One line for a run with invalid labels (None: all valid): counts, the dominant cause, an example (left out
    where a table of the invalid labels follows)."""
    invalid = report.invalid()
    if not invalid:
        return None
    first = invalid[0]
    return f"{report.summary()} — {_checklist(report)}" + (
        f"; e.g. case {first.case_id}: {first.chunk_id} {first.status}: {first.detail}" if example else "")


def _checklist(report: LabelReport) -> str:
    """The docs/design.md §8 checklist line of the most frequent invalid status."""
    counts = {s: n for s, n in report.counts().items() if s != "ok"}
    dominant = max(counts, key=lambda status: counts[status])
    return checklist_item(dominant, counts[dominant], len(report.rows))


def evaluate(engine: sa.Engine, plan: EvaluationPlan, *, batch_size: int = BATCH_SIZE, readers: int | None = None,
             strict: bool = False, progress: Callable[[str, int], Progress | None] | None = None,
             on_labels: Callable[[LabelReport], None] | None = None,
             on_outcome: Callable[[EvaluationOutcome], None] | None = None) -> list[EvaluationOutcome]:
    """Check the labels (seen by ``on_labels``), then run and store every strategy of ``plan`` (at once in forked
    processes: :mod:`~rag_pipeline.evaluation.click`); their outcomes in order, or the first one's error after every
    strategy ran. ``on_outcome`` sees each stored run as soon as it is stored (possibly from another thread)."""
    ref = plan.dataset
    with engine.connect() as conn:
        require_runnable(conn, ref.kb, plan.strategies)
    report = check_labels_first(engine, ref, strict=strict)
    if on_labels:
        on_labels(report)
    def stored(_i: int, result: EvaluationOutcome | BaseException) -> None:
        if on_outcome and isinstance(result, EvaluationOutcome):
            on_outcome(result)

    results = evaluate_click(engine, ref.dataset, ref.kb, [ClickRun(s) for s in plan.strategies],
                             batch_size=batch_size, readers=readers, progress=progress, on_result=stored)
    for result in results:  # every strategy ran (or failed) by now: the first failure, in the order given
        if isinstance(result, BaseException):
            raise result
    return [r for r in results if isinstance(r, EvaluationOutcome)]


def evaluate_stored(engine: sa.Engine, dataset_id: str, strategy_version: str, *, batch_size: int = BATCH_SIZE,
                    readers: int | None = None, strict: bool = False, partition_key: str | None = None,
                    dagster_run_id: str | None = None, progress: Progress | None = None,
                    logger: logging.Logger | None = None, queued_run_id: str | None = None) -> EvaluationOutcome:
    """Evaluate one strategy on a stored dataset version after the label check (the Dagster asset's step)."""
    [result] = evaluate_stored_click(
        engine, dataset_id, [StoredRun(strategy_version, queued_run_id, partition_key)], batch_size=batch_size,
        readers=readers, strict=strict, dagster_run_id=dagster_run_id,
        progress=(lambda _version, _cases: progress) if progress else None, logger=logger)
    if isinstance(result, BaseException):
        raise result
    return result


@dataclass(frozen=True)
class StoredRun:
    """One strategy of a click on a stored dataset version: the ``queued`` row it carries out (else a new row), and
    its Dagster partition."""

    strategy_version: str
    queued_run_id: str | None = None
    partition_key: str | None = None


def evaluate_stored_click(engine: sa.Engine, dataset_id: str, runs: Sequence[StoredRun], *,
                          batch_size: int = BATCH_SIZE, readers: int | None = None, strict: bool = False,
                          dagster_run_id: str | None = None,
                          progress: Callable[[str, int], Progress | None] | None = None,
                          logger: logging.Logger | None = None) -> list[EvaluationOutcome | BaseException]:
    """Evaluate several strategies of a stored dataset version at once (:mod:`~rag_pipeline.evaluation.click`),
    after one label check; each strategy's outcome or error, in order. A strategy that cannot run fails alone; a
    dataset that cannot run fails every one. A queued row whose strategy failed is marked ``failed`` with why."""
    results: list[EvaluationOutcome | BaseException | None] = [None] * len(runs)
    try:
        ref = resolve_dataset(engine, dataset_id, source="stored")
        registry = load_registry()
        with engine.connect() as conn:
            for i, run in enumerate(runs):
                try:
                    strategy = get_strategy(run.strategy_version, registry)
                    require_runnable(conn, ref.kb, [strategy])
                except Exception as exc:  # noqa: BLE001 - this strategy's failure; the others run
                    results[i] = exc
        headline = label_headline(check_labels_first(engine, ref, strict=strict))
        if headline and logger:
            logger.warning(headline)
    except Exception as exc:  # noqa: BLE001 - the dataset cannot run: every strategy fails with why
        results = [exc] * len(runs)
    todo = [i for i, r in enumerate(results) if r is None]
    if todo:
        click = [ClickRun(get_strategy(runs[i].strategy_version, registry), runs[i].queued_run_id,
                          runs[i].partition_key) for i in todo]
        for i, result in zip(todo, evaluate_click(engine, ref.dataset, ref.kb, click, batch_size=batch_size,
                                                  readers=readers, dagster_run_id=dagster_run_id,
                                                  progress=progress, logger=logger), strict=True):
            results[i] = result
    for run, ended in zip(runs, results, strict=True):
        if isinstance(ended, BaseException) and run.queued_run_id \
                and not isinstance(ended, run_records.RunNotQueuedError):  # another evaluation's row: untouched
            # a run already marked failed inside keeps its reason (only queued/running rows change)
            run_records.mark_failed(engine, run.queued_run_id, run_records.failure_reason(ended))
    return [r for r in results if r is not None]


def run_summaries(engine: sa.Engine, run_ids: Sequence[str]) -> list[RunSummary]:
    """The summary of each run (ids or unique prefixes), in order."""
    with engine.connect() as conn:
        return [summary_of(run_records.get_run(conn, run_id)) for run_id in run_ids]


def run_page(engine: sa.Engine, *, knowledge_base: str | None = None, limit: int = 100, offset: int = 0,
             **filters) -> tuple[int, list[RunSummary]]:
    """(how many runs match, a page of their summaries, newest first); ``knowledge_base``: a name or id."""
    status = filters.get("status")
    if status and status not in run_records.STATUSES:
        raise ValueError(f"status must be one of {', '.join(run_records.STATUSES)}, got {status!r}")
    run_records.sweep_gone(engine)  # a run whose process fell silent is listed failed, with why
    with engine.connect() as conn:
        kb_id = resolve_knowledge_base(conn, knowledge_base).id if knowledge_base else None
        total = count_runs(conn, stale=run_records.stale_after_seconds(), knowledge_base_id=kb_id, **filters)
        rows = run_records.list_runs(conn, knowledge_base_id=kb_id, limit=limit, offset=offset, **filters)
        return total, [summary_of(r) for r in rows]


def evaluation_detail(engine: sa.Engine, run_id: str, *, candidates: str = "default", case_id: str | None = None,
                      offset: int = 0, limit: int | None = None, include_text: bool = False) -> RunDetail:
    """docs/design.md §6.3 detail of a run: a page of its cases (or ``case_id``) with their candidates."""
    with engine.connect() as conn:
        run_uuid = run_records.resolve_run_id(conn, run_id)
        summary = summary_of(run_records.get_run(conn, run_uuid))
        cases = list(reports.iter_cases(conn, run_uuid, include_text=include_text, candidates=candidates,
                                        case_id=case_id, offset=0 if case_id else offset, limit=limit))
    return RunDetail(report_version=REPORT_VERSION, summary=summary, cases=cases)


def write_report(engine: sa.Engine, run_id: str, fp: IO[str], *, include_text: bool = False,
                 candidates: str = "default", case_id: str | None = None, fmt: str = "json") -> int:
    """Stream the report of run ``run_id`` (id or unique prefix) to ``fp`` as JSON or JSON Lines."""
    with engine.connect() as conn:
        return reports.write_report(conn, run_records.resolve_run_id(conn, run_id), fp, include_text=include_text,
                                    candidates=candidates, case_id=case_id, fmt=fmt)


def case_tables(engine: sa.Engine, run_id: str, *, limit: int) -> RunTables:
    """A run's summary, its first ``limit`` cases and its 10 worst cases, for dashboards."""
    with engine.connect() as conn:
        summary = summary_of(run_records.get_run(conn, run_id))
        cases = case_queries.overview(conn, run_id, limit=limit)
        worst = case_queries.overview(conn, run_id, worst_first=True, limit=10)
    return RunTables(summary=summary, cases=cases, worst=worst)


def rescore(engine: sa.Engine, run_id: str, dataset: str, *, version: str | None = None) -> RescoredRun:
    """Re-score run ``run_id``'s stored pools on ``dataset`` (a file, a stored version id, or the latest stored
    version of a name on the run's knowledge base; ``version``: a hash prefix) as a new run; nothing retrieved."""
    old = run_summaries(engine, [run_id])[0]
    ref = resolve_dataset(engine, dataset, knowledge_base=old.knowledge_base.name, version=version)
    new_id, left_out = rescore_run(engine, old.run_id, ref)
    new, old = run_summaries(engine, [new_id, old.run_id])
    return RescoredRun(run=new, rescored_from=old, cases_left_out=left_out)
