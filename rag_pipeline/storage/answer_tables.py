"""Answer tables (docs/design.md §12.6): one row per scored answer run, one per case of it.

A run and its case rows are written in one transaction; ``answer_case_results.record`` keeps the scored answer line
(without ``raw_response``) for re-scoring; deleting a run removes its case rows."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Boolean, CheckConstraint, Double, ForeignKey, Index, Integer, String, Text
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from rag_pipeline.contracts.answers import VERDICTS
from rag_pipeline.storage.tables import Base, _now

VERDICT_CHECK = "verdict IN (" + ", ".join(f"'{v}'" for v in VERDICTS) + ")"
_HEX64 = "'^[0-9a-f]{64}$'"


class _AnswerMetricColumns:
    """One double precision column per answer metric (:class:`~rag_pipeline.contracts.answers.AnswerMetrics`, a
    test holds them equal; a new metric needs a migration)."""

    exact_match: Mapped[float | None] = mapped_column(Double)
    f1: Mapped[float | None] = mapped_column(Double)
    answer_contains: Mapped[float | None] = mapped_column(Double)
    key_point_recall: Mapped[float | None] = mapped_column(Double)
    citation_precision: Mapped[float | None] = mapped_column(Double)
    citation_recall: Mapped[float | None] = mapped_column(Double)
    citation_validity: Mapped[float | None] = mapped_column(Double)
    sentence_citation_coverage: Mapped[float | None] = mapped_column(Double)
    lexical_support: Mapped[float | None] = mapped_column(Double)
    answer_score: Mapped[float | None] = mapped_column(Double)


class AnswerRunRow(_AnswerMetricColumns, Base):
    """A scored answer run: what was scored (dataset version, knowledge-base version, answerer, answers file
    hash) with which settings (``scoring``, its hash ``scoring_version``), its summary and answer metric means."""

    __tablename__ = "answer_runs"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    dataset_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("retrieval_evaluation_datasets.id", ondelete="CASCADE"), nullable=False)
    knowledge_base_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("knowledge_bases.id", ondelete="CASCADE"), nullable=False)
    knowledge_base_version: Mapped[str | None] = mapped_column(String(64))
    answerer: Mapped[str] = mapped_column(String(200), nullable=False)
    answerer_version: Mapped[str] = mapped_column(String(200), nullable=False)
    scoring_version: Mapped[str] = mapped_column(String(64), nullable=False)
    scoring = mapped_column(JSONB, nullable=False)
    answers_sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    rescored_from: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("answer_runs.id", ondelete="SET NULL"))
    case_count: Mapped[int] = mapped_column(Integer, nullable=False)
    answered: Mapped[int] = mapped_column(Integer, nullable=False)
    refusal_recall: Mapped[float | None] = mapped_column(Double)
    false_refusal_rate: Mapped[float | None] = mapped_column(Double)
    summary = mapped_column(JSONB, nullable=False)
    partition_key: Mapped[str | None] = mapped_column(Text)
    dagster_run_id: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = _now()
    __table_args__ = (
        Index("ix_answer_runs_dataset_answerer", "dataset_id", "answerer", "created_at"),
        Index("ix_answer_runs_kb", "knowledge_base_id"),
        CheckConstraint(f"knowledge_base_version ~ {_HEX64}", name="ck_answer_runs_knowledge_base_version"),
        CheckConstraint(f"answers_sha256 ~ {_HEX64}", name="ck_answer_runs_answers_sha256"),
        CheckConstraint("answered BETWEEN 0 AND case_count", name="ck_answer_runs_answered"))


class AnswerCaseResultRow(_AnswerMetricColumns, Base):
    """One case of an answer run: its verdict, refusal and metrics as columns (to filter and sort), the answer
    line it was scored from (``record``, NULL: the file had no line for it) and the whole result."""

    __tablename__ = "answer_case_results"
    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("answer_runs.id", ondelete="CASCADE"), primary_key=True)
    case_id: Mapped[str] = mapped_column(Text, primary_key=True)
    case_index: Mapped[int] = mapped_column(Integer, nullable=False)
    verdict: Mapped[str] = mapped_column(String(32), nullable=False)
    refused: Mapped[bool] = mapped_column(Boolean, nullable=False)
    record = mapped_column(JSONB)
    result = mapped_column(JSONB, nullable=False)
    __table_args__ = (
        Index("ix_answer_case_results_verdict", "run_id", "verdict"),
        CheckConstraint(VERDICT_CHECK, name="ck_answer_case_results_verdict"))
