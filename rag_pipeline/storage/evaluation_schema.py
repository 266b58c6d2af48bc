"""Evaluation tables (seed §6.1) plus per-case results and the strategy parameter registry.

``retrieval_evaluation_runs.status`` moves (``queued`` →) ``running`` → ``succeeded`` | ``failed``; a ``running``
run whose ``heartbeat_at`` is stale is shown as ``abandoned``. ``queued``: submitted by the HTTP API to Dagster,
not started yet; ``cases_done`` counts the cases evaluated so far (updated per batch). Readers only treat ``succeeded`` runs as
results, so a run's candidates, case results and summary count together or not at all.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from rag_pipeline.storage.schema import Base, _now

# One column per metric, in the order of rag_pipeline.evaluation.metrics.METRIC_NAMES (a test keeps them equal;
# a new metric needs a migration anyway).
METRIC_COLUMNS = ("precision_at_k", "recall_at_k", "reciprocal_rank", "ndcg_at_k", "hit_at_k",
                  "average_precision_at_k", "r_precision")


class RetrievalEvaluationDataset(Base):
    """One version of a labelled dataset: the same file content twice is one row.

    ``name`` is the dataset's identity (its file stem = the Dagster partition key). ``last_seen_at`` moves to
    now() whenever the version is stored again, so the latest version of a dataset is the one with the
    greatest ``last_seen_at``. ``cases`` hold each case as validated (a graded case's ``relevant_chunk_ids``
    is its ``{chunk_id: grade}`` object, grade-0 ids included)."""

    __tablename__ = "retrieval_evaluation_datasets"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(200), nullable=False)
    knowledge_base_name: Mapped[str] = mapped_column(String(200), nullable=False)
    source_path: Mapped[str | None] = mapped_column(Text)
    content_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    case_count: Mapped[int] = mapped_column(Integer, nullable=False)
    cases = mapped_column(JSONB, nullable=False)
    created_at: Mapped[datetime] = _now()
    last_seen_at: Mapped[datetime] = _now()
    __table_args__ = (UniqueConstraint("name", "knowledge_base_name", "content_hash"),)


class RetrievalStrategy(Base):
    """The parameters a strategy version ran with; a version may never change its parameters."""

    __tablename__ = "retrieval_strategies"
    version: Mapped[str] = mapped_column(String(100), primary_key=True)
    params_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    params = mapped_column(JSONB, nullable=False)
    created_at: Mapped[datetime] = _now()


class RetrievalEvaluationRun(Base):
    __tablename__ = "retrieval_evaluation_runs"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    dataset_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("retrieval_evaluation_datasets.id", ondelete="CASCADE"), nullable=False
    )
    knowledge_base_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("knowledge_bases.id", ondelete="CASCADE"), nullable=False
    )
    strategy_version: Mapped[str] = mapped_column(String(100), nullable=False)
    params_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    strategy_params = mapped_column(JSONB, nullable=False)
    embedding_model: Mapped[str | None] = mapped_column(String(100))
    knowledge_base_version: Mapped[str | None] = mapped_column(String(64))
    """Content version of the knowledge base the run measured (knowledge_base.versions); NULL before 0004."""
    status: Mapped[str] = mapped_column(String(20), nullable=False, default="running")
    is_current: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    partition_key: Mapped[str | None] = mapped_column(Text)
    dagster_run_id: Mapped[str | None] = mapped_column(String(64))
    case_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    candidate_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    precision_at_k: Mapped[float | None] = mapped_column(Double)
    recall_at_k: Mapped[float | None] = mapped_column(Double)
    reciprocal_rank: Mapped[float | None] = mapped_column(Double)
    ndcg_at_k: Mapped[float | None] = mapped_column(Double)
    hit_at_k: Mapped[float | None] = mapped_column(Double)
    average_precision_at_k: Mapped[float | None] = mapped_column(Double)
    r_precision: Mapped[float | None] = mapped_column(Double)
    timings = mapped_column(JSONB)
    summary = mapped_column(JSONB)
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = _now()
    heartbeat_at: Mapped[datetime] = _now()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cases_done: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default=text("0"))
    queued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    __table_args__ = (
        Index("ix_runs_dataset_strategy", "dataset_id", "strategy_version"),
        Index("ix_runs_kb", "knowledge_base_id"),
        CheckConstraint("status IN ('queued', 'running', 'succeeded', 'failed', 'abandoned')", name="ck_runs_status"),
        CheckConstraint("knowledge_base_version ~ '^[0-9a-f]{64}$'", name="ck_runs_knowledge_base_version"),
    )


class RetrievalEvaluationCandidate(Base):
    """Seed §4.1: one row per candidate of the full pool of one case (no chunk text).

    ``relevance_grade``: the case's judged grade of this chunk (0-10; 0 = judged not relevant), NULL when
    the case did not judge it; ``is_relevant`` = grade >= 1."""

    __tablename__ = "retrieval_evaluation_candidates"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    evaluation_run_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("retrieval_evaluation_runs.id", ondelete="CASCADE"), nullable=False
    )
    case_id: Mapped[str] = mapped_column(Text, nullable=False)
    chunk_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    document_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    document_name: Mapped[str] = mapped_column(Text, nullable=False)
    rank: Mapped[int] = mapped_column(Integer, nullable=False)
    vector_score: Mapped[float | None] = mapped_column(Double)
    vector_rank: Mapped[int | None] = mapped_column(Integer)
    keyword_score: Mapped[float | None] = mapped_column(Double)
    keyword_rank: Mapped[int | None] = mapped_column(Integer)
    rerank_score: Mapped[float | None] = mapped_column(Double)
    final_score: Mapped[float] = mapped_column(Double, nullable=False)
    is_relevant: Mapped[bool] = mapped_column(Boolean, nullable=False)
    is_selected: Mapped[bool] = mapped_column(Boolean, nullable=False)
    strategy_version: Mapped[str] = mapped_column(String(100), nullable=False)
    relevance_grade: Mapped[int | None] = mapped_column(SmallInteger)
    __table_args__ = (
        Index("ix_candidates_run_case", "evaluation_run_id", "case_id", "rank"),
        CheckConstraint("relevance_grade BETWEEN 0 AND 10", name="ck_candidates_relevance_grade"),
    )


class RetrievalEvaluationCaseResult(Base):
    """Per-case metrics of one run, with the case's own k.

    ``relevant_chunk_ids``: the ids that count as relevant (grade >= 1); ``relevance_grades``: every judged
    id -> grade (grade 0 included; ``{id: 1}`` for a list-form case; NULL in runs stored before it existed)."""

    __tablename__ = "retrieval_evaluation_case_results"
    evaluation_run_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("retrieval_evaluation_runs.id", ondelete="CASCADE"), primary_key=True
    )
    case_id: Mapped[str] = mapped_column(Text, primary_key=True)
    case_index: Mapped[int] = mapped_column(Integer, nullable=False)
    question: Mapped[str] = mapped_column(Text, nullable=False)
    k: Mapped[int] = mapped_column(Integer, nullable=False)
    relevant_chunk_ids = mapped_column(JSONB, nullable=False)
    retrieved_chunk_ids = mapped_column(JSONB, nullable=False)
    first_relevant_rank: Mapped[int | None] = mapped_column(Integer)
    precision_at_k: Mapped[float] = mapped_column(Double, nullable=False)
    recall_at_k: Mapped[float] = mapped_column(Double, nullable=False)
    reciprocal_rank: Mapped[float] = mapped_column(Double, nullable=False)
    ndcg_at_k: Mapped[float] = mapped_column(Double, nullable=False)
    hit_at_k: Mapped[float] = mapped_column(Double, nullable=False)
    average_precision_at_k: Mapped[float] = mapped_column(Double, nullable=False)
    r_precision: Mapped[float] = mapped_column(Double, nullable=False)
    miss_reasons = mapped_column(JSONB)
    relevance_grades = mapped_column(JSONB)
