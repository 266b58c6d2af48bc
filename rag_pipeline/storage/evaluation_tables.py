"""Evaluation tables (docs/design.md §6.1) plus per-case results and the strategy parameter registry.

``retrieval_evaluation_runs.status``: (``queued`` →) ``running`` → ``succeeded`` | ``failed`` (stale heartbeat:
shown ``abandoned``); readers treat only ``succeeded`` runs as results."""

from __future__ import annotations

import uuid
from datetime import datetime

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    Boolean,
    CheckConstraint,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from rag_pipeline.storage.tables import Base, _now


class RetrievalEvaluationDataset(Base):
    """One version of a labelled dataset (docs/design.md §2.4): the same file content twice is one row; ``cases``
    hold each case as validated (a graded case's ``relevant_chunk_ids`` is its ``{chunk_id: grade}`` object)."""

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
        ForeignKey("retrieval_evaluation_datasets.id", ondelete="CASCADE"), nullable=False)
    knowledge_base_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("knowledge_bases.id", ondelete="CASCADE"), nullable=False)
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
    worker: Mapped[str | None] = mapped_column(Text)
    """The process that executed the run: a Celery worker's node name (``NAME@host``), else the host; NULL for a
    run made outside Dagster or before 0008."""
    owner_host: Mapped[str | None] = mapped_column(Text)
    """The host, process id and process start time (seconds since the epoch) of the process evaluating a
    ``running`` run, so a run whose process is gone is marked ``failed`` (0009); of a ``queued`` run, the process
    that queued it (until the evaluation takes it over); NULL for older rows."""
    owner_pid: Mapped[int | None] = mapped_column(Integer)
    owner_started_at: Mapped[float | None] = mapped_column(Double)
    case_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    candidate_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    # the run's means (contracts.metrics.Metrics, a test holds them equal), NULL until it succeeds
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
    queue: Mapped[str | None] = mapped_column(Text)
    """The queue of a run the HTTP API queued (``RAG_EVALUATION_QUEUE``, 0010): the daemon serving it runs it."""
    __table_args__ = (
        Index("ix_runs_dataset_strategy", "dataset_id", "strategy_version"),
        Index("ix_runs_kb", "knowledge_base_id"),
        CheckConstraint("status IN ('queued', 'running', 'succeeded', 'failed', 'abandoned')", name="ck_runs_status"),
        CheckConstraint("knowledge_base_version ~ '^[0-9a-f]{64}$'", name="ck_runs_knowledge_base_version"))


class DagsterSensorTick(Base):
    """The last tick of a Dagster sensor (0010): the API and the console read ``queued_evaluations``'s to say
    whether a daemon picks queued runs up."""

    __tablename__ = "dagster_sensor_ticks"
    sensor: Mapped[str] = mapped_column(Text, primary_key=True)
    ticked_at: Mapped[datetime] = _now()

CANDIDATE_PARTITION_PREFIX = "eval_candidates_"
"""Each run's candidates live in the partition ``eval_candidates_<run id hex>`` (migration 0005)."""


class RetrievalEvaluationCandidateRow(Base):
    """The storage of the candidate pools (docs/design.md §4.2): one row per candidate, only what no join gives,
    widest columns first, in its run's own partition; read through :data:`CANDIDATES_VIEW`."""

    __tablename__ = "retrieval_evaluation_candidate_rows"
    evaluation_run_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    chunk_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    final_score: Mapped[float] = mapped_column(Double, nullable=False)
    vector_score: Mapped[float | None] = mapped_column(Double)
    keyword_score: Mapped[float | None] = mapped_column(Double)
    rerank_score: Mapped[float | None] = mapped_column(Double)
    case_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    keyword_rank: Mapped[int | None] = mapped_column(Integer)
    vector_rank: Mapped[int | None] = mapped_column(SmallInteger)  # <= ef_search <= 1000
    relevance_grade: Mapped[int | None] = mapped_column(SmallInteger)
    is_selected: Mapped[bool] = mapped_column(Boolean, nullable=False)
    __table_args__ = (
        PrimaryKeyConstraint("evaluation_run_id", "case_index", "rank", name="pk_candidate_rows"),
        CheckConstraint("relevance_grade BETWEEN 0 AND 10", name="ck_candidate_rows_relevance_grade"),
        {"postgresql_partition_by": "LIST (evaluation_run_id)"})


CANDIDATES_VIEW = "retrieval_evaluation_candidates"
"""The original name (docs/design.md §4.1): a view over :class:`RetrievalEvaluationCandidateRow` with every field."""

_VIEWS = MetaData()  # not Base.metadata: the schema comparison knows tables, not views


class _ViewBase(DeclarativeBase):
    metadata = _VIEWS


class RetrievalEvaluationCandidate(_ViewBase):
    """The view ``retrieval_evaluation_candidates`` (docs/design.md §4.1, §4.2); an insert is routed into the run's
    partition (the case result must exist: it gives ``case_index``)."""

    __tablename__ = CANDIDATES_VIEW
    evaluation_run_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    case_id: Mapped[str] = mapped_column(Text, primary_key=True)
    chunk_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    document_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    document_name: Mapped[str | None] = mapped_column(Text)
    rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    vector_score: Mapped[float | None] = mapped_column(Double)
    vector_rank: Mapped[int | None] = mapped_column(Integer)
    keyword_score: Mapped[float | None] = mapped_column(Double)
    keyword_rank: Mapped[int | None] = mapped_column(Integer)
    rerank_score: Mapped[float | None] = mapped_column(Double)
    final_score: Mapped[float] = mapped_column(Double)
    is_relevant: Mapped[bool] = mapped_column(Boolean)
    is_selected: Mapped[bool] = mapped_column(Boolean)
    strategy_version: Mapped[str | None] = mapped_column(String(100))
    relevance_grade: Mapped[int | None] = mapped_column(SmallInteger)
    case_index: Mapped[int | None] = mapped_column(Integer)


class QuestionEmbedding(Base):
    """A question's vector by one model, keyed by the sha256 of the question text: embedded once, reused by
    every later run on any dataset holding the same question."""

    __tablename__ = "question_embeddings"
    question_hash: Mapped[bytes] = mapped_column(LargeBinary, primary_key=True)
    model: Mapped[str] = mapped_column(ForeignKey("embedding_models.name", ondelete="CASCADE"), primary_key=True)
    embedding = mapped_column(Vector(), nullable=False)
    created_at: Mapped[datetime] = _now()


class RetrievalEvaluationCaseResult(Base):
    """Per-case metrics of one run, with the case's own k.

    ``relevant_chunk_ids``: the ids that count as relevant (grade >= 1); ``relevance_grades``: every judged
    id -> grade (grade 0 included; ``{id: 1}`` for a list-form case; NULL in runs stored before it existed)."""

    __tablename__ = "retrieval_evaluation_case_results"
    evaluation_run_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("retrieval_evaluation_runs.id", ondelete="CASCADE"), primary_key=True)
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
    latency_ms: Mapped[float | None] = mapped_column(Double)  # an HTTP retriever's reply time (0012)
    retrieval_error: Mapped[str | None] = mapped_column(Text)  # why the retriever gave no ranking (0012)
    __table_args__ = (Index("ix_case_results_run_case_index", "evaluation_run_id", "case_index", unique=True),)


class RetrievalComparisonRun(Base):
    """The runs a stored comparison refers to (``comparison`` = ``<dataset>|<knowledge base>``; the latest
    comparison of each replaces the previous one's): retention never removes them unless asked."""

    __tablename__ = "retrieval_comparison_runs"
    comparison: Mapped[str] = mapped_column(Text, primary_key=True)
    evaluation_run_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("retrieval_evaluation_runs.id", ondelete="CASCADE"), primary_key=True)
    compared_at: Mapped[datetime] = _now()
    __table_args__ = (Index("ix_comparison_runs_run", "evaluation_run_id"),)


class ExternalChunkId(Base):
    """A chunk of an external system: its original id (a TREC docno, an HTTP retriever's or an attached table's
    chunk id) behind the chunk UUID it maps to, ``uuid5(EXTERNAL_ID_NAMESPACE, "<knowledge base>\\x1f<docno>")``
    (0011), and, when known, its text (0015: the chunk catalogue; ``content IS NOT NULL`` marks a catalogued one).
    Exports give the original back; an id that is a canonical UUID maps to itself and has a row only when
    catalogued."""

    __tablename__ = "external_chunk_ids"
    knowledge_base_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("knowledge_bases.id", ondelete="CASCADE"), primary_key=True)
    chunk_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    external_id: Mapped[str] = mapped_column(Text, nullable=False)
    title: Mapped[str | None] = mapped_column(Text)
    content: Mapped[str | None] = mapped_column(Text)


class HttpRetrieverReply(Base):
    """A case an ``http`` strategy's retriever answered, kept until the run that asked is stored (a killed
    evaluation resumes without asking it again); the stored run's transaction deletes them (0012)."""

    __tablename__ = "http_retriever_replies"
    params_hash: Mapped[str] = mapped_column(Text, primary_key=True)
    dataset_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("retrieval_evaluation_datasets.id", ondelete="CASCADE"), primary_key=True)
    case_id: Mapped[str] = mapped_column(Text, primary_key=True)
    ranking = mapped_column(JSONB, nullable=False)
    latency_ms: Mapped[float] = mapped_column(Double, nullable=False)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[datetime] = _now()
