"""Storing scored answer runs and reading them back as the contracts (docs/design.md §12.6)."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from rag_pipeline.answers.runs import queries
from rag_pipeline.contracts.answers import (
    ANSWER_METRIC_NAMES,
    AnswerCaseResult,
    AnswerRecord,
    AnswerRun,
    AnswerRunList,
    AnswerScoring,
    AnswerSummary,
)
from rag_pipeline.contracts.errors import ConflictError, NotFoundError

UNNAMED_ANSWERER = "unnamed"
_MIN_PREFIX = 4
_HEX = re.compile(r"[0-9a-f-]+")


class AnswerRunNotFoundError(NotFoundError, LookupError):
    """No answer run has that id (or id prefix)."""


class AmbiguousAnswerRunError(ConflictError, ValueError):
    """An id prefix that several answer runs start with."""


def answerer_identity(name: str | None) -> tuple[str, str]:
    """``(answerer, answerer_version)`` of ``NAME@VERSION`` (split at the last ``@``); a bare ``NAME`` gets the
    first 12 hex digits of SHA-256(NAME) as its version; none (or blank) is ``unnamed``, versioned the same way."""
    name = (name or "").strip() or UNNAMED_ANSWERER
    base, at, version = name.rpartition("@")
    if at and base.strip() and version.strip():
        return base.strip(), version.strip()
    return name, hashlib.sha256(name.encode("utf-8")).hexdigest()[:12]


def scoring_version(scoring: AnswerScoring) -> str:
    """The SHA-256 of the scoring settings as canonical JSON: part of a run's identity."""
    text = json.dumps(scoring.model_dump(mode="json"), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class RunSubject:
    """What a run scored: dataset version, knowledge base, answerer, answers hash, the run it re-scores."""

    dataset_id: str
    knowledge_base_id: str
    knowledge_base_version: str | None
    answerer: str
    answerer_version: str
    answers_sha256: str
    rescored_from: str | None = None
    partition_key: str | None = None
    dagster_run_id: str | None = None


def store_run(conn: sa.Connection, subject: RunSubject, scoring: AnswerScoring, results: Sequence[AnswerCaseResult],
              summary: AnswerSummary, records: Mapping[str, AnswerRecord]) -> str:
    """Insert the run and its results with their answer lines (in the caller's transaction); the run id."""
    run_id = uuid.uuid4()
    means = {m: summary.metrics[m].mean if m in summary.metrics else None for m in ANSWER_METRIC_NAMES}
    queries.insert_run(conn, {
        "id": run_id, "dataset_id": subject.dataset_id, "knowledge_base_id": subject.knowledge_base_id,
        "knowledge_base_version": subject.knowledge_base_version, "answerer": subject.answerer,
        "answerer_version": subject.answerer_version, "scoring_version": scoring_version(scoring),
        "scoring": scoring.model_dump_json(), "answers_sha256": subject.answers_sha256,
        "rescored_from": subject.rescored_from, "case_count": summary.cases, "answered": summary.answered,
        **means, "refusal_recall": summary.refusal_recall.mean, "false_refusal_rate": summary.false_refusal_rate.mean,
        "summary": summary.model_dump_json(), "partition_key": subject.partition_key,
        "dagster_run_id": subject.dagster_run_id})
    queries.copy_cases(conn, (_case_row(run_id, i, r, records.get(r.case_id)) for i, r in enumerate(results)))
    return str(run_id)


def _case_row(run_id: uuid.UUID, index: int, result: AnswerCaseResult, record: AnswerRecord | None) -> tuple:
    """One row in :data:`~rag_pipeline.answers.runs.queries.CASE_COLUMNS` order."""
    kept = None if record is None else record.model_dump_json(exclude={"raw_response"}, exclude_none=True)
    metrics = result.answer_metrics
    return (run_id, result.case_id, index, result.verdict, result.refused,
            *(getattr(metrics, m) for m in ANSWER_METRIC_NAMES), kept, result.model_dump_json())


def resolve_run_id(conn: sa.Connection, run_id: str) -> str:
    """The answer run ``run_id`` names: its full id, or a unique prefix of at least 4 hex digits."""
    text = str(run_id).strip().lower()
    try:
        return str(uuid.UUID(text))
    except ValueError:
        pass
    if len(text.replace("-", "")) < _MIN_PREFIX or not _HEX.fullmatch(text):
        raise AnswerRunNotFoundError(f"{str(run_id)!r} is not an answer run id (a UUID, or a unique prefix of at "
                                     f"least {_MIN_PREFIX} hex digits; see `rag-pipeline answers runs`)")
    rows = queries.runs_with_prefix(conn, text)
    if not rows:
        raise AnswerRunNotFoundError(f"no answer run id starts with {text!r} (see `rag-pipeline answers runs`)")
    if len(rows) > 1:
        shown = ", ".join(f"{r.id} ({r.answerer})" for r in rows[:2])
        raise AmbiguousAnswerRunError(f"answer run id prefix {text!r} matches several runs: {shown}"
                                      f"{' and more' if len(rows) > 2 else ''}; give more characters")
    return str(rows[0].id)


def load_run(conn: sa.Connection, run_id: str) -> tuple[AnswerRun, sa.Row]:
    """A stored run (id or unique prefix) and its row (``dataset_id``, ``knowledge_base_id``, ``scoring``)."""
    row = queries.run_row(conn, resolve_run_id(conn, run_id))
    if row is None:
        raise AnswerRunNotFoundError(f"no answer run {run_id} (see `rag-pipeline answers runs`)")
    return run_of(row), row


def run_of(row: sa.Row) -> AnswerRun:
    return AnswerRun(run_id=str(row.id), created_at=row.created_at.isoformat(), dataset=row.dataset,
                     dataset_version=row.dataset_version, knowledge_base=row.knowledge_base,
                     knowledge_base_version=row.knowledge_base_version, answerer=row.answerer,
                     answerer_version=row.answerer_version, scoring_version=row.scoring_version,
                     answers_sha256=row.answers_sha256, summary=AnswerSummary.model_validate(row.summary),
                     scoring=AnswerScoring.model_validate(row.scoring),
                     rescored_from=None if row.rescored_from is None else str(row.rescored_from))


def list_runs(conn: sa.Connection, *, dataset: str | None = None, knowledge_base_id=None,
              answerer: str | None = None, limit: int = 100, offset: int = 0) -> AnswerRunList:
    """Stored runs, newest first, filtered by dataset name, knowledge base id and answerer name."""
    total, rows = queries.list_runs(conn, dataset=dataset, kb_id=knowledge_base_id, answerer=answerer,
                                    limit=limit, offset=offset)
    return AnswerRunList(runs=[run_of(r) for r in rows], total=total)


def load_cases(conn: sa.Connection, run_id: str, *, verdict: str | None = None) -> list[AnswerCaseResult]:
    """A run's case results in dataset order (``verdict``: only those)."""
    return [AnswerCaseResult.model_validate(r.result) for r in queries.case_results(conn, run_id, verdict)]


def load_records(conn: sa.Connection, run_id: str) -> dict[str, AnswerRecord]:
    """The answer lines a run was scored from, by case id (cases the file had no line for are absent)."""
    return {r.case_id: AnswerRecord.model_validate_json(json.dumps(r.record))
            for r in queries.case_results(conn, run_id, None) if r.record is not None}


def scorer_chunks(conn: sa.Connection, knowledge_base_id, records: Iterable[AnswerRecord]
                  ) -> tuple[set[str], dict[str, str]]:
    """``(cited ids that are searchable chunks, cited chunk id -> text)``, lower-case, in one statement."""
    cited = {c.strip().lower() for r in records for c in (r.cited_chunk_ids or ())}
    ids = sorted(c for c in cited if _canonical_uuid(c))
    rows = queries.cited_chunks(conn, knowledge_base_id, ids)
    return {r.id for r in rows if r.searchable}, {r.id: r.content for r in rows}


def _canonical_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False
