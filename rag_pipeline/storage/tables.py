"""The knowledge-base tables as SQLAlchemy 2 typed models (docs/design.md §6.1), created by the migrations."""

from __future__ import annotations

import enum
import uuid
from datetime import datetime

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    Boolean,
    CheckConstraint,
    DateTime,
    Double,
    Enum,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, TSVECTOR, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class DocumentStatus(str, enum.Enum):
    PROCESSING = "PROCESSING"
    READY = "READY"
    FAILED = "FAILED"


class DocumentPublicationStatus(str, enum.Enum):
    DRAFT = "DRAFT"
    PUBLISHED = "PUBLISHED"
    UNPUBLISHED = "UNPUBLISHED"


def _enum(cls: type[enum.Enum], name: str) -> Enum:
    return Enum(cls, name=name, values_callable=lambda e: [m.value for m in e])


def _now() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)


class KnowledgeBase(Base):
    __tablename__ = "knowledge_bases"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True, nullable=False)
    text_search: Mapped[str] = mapped_column(String(20), nullable=False, default="simple")
    chunk_size: Mapped[int] = mapped_column(Integer, nullable=False)
    chunk_overlap: Mapped[int] = mapped_column(Integer, nullable=False)
    chunk_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    avg_chunk_length: Mapped[float] = mapped_column(Double, nullable=False, default=0.0)
    created_at: Mapped[datetime] = _now()
    kind: Mapped[str] = mapped_column(String(20), nullable=False, server_default="project")
    attached_mapping: Mapped[dict | None] = mapped_column(JSONB)
    url_env: Mapped[str | None] = mapped_column(String(200))


class Document(Base):
    __tablename__ = "documents"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    knowledge_base_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("knowledge_bases.id", ondelete="CASCADE"), index=True, nullable=False)
    original_name: Mapped[str] = mapped_column(Text, nullable=False)
    title: Mapped[str | None] = mapped_column(Text)
    content: Mapped[str] = mapped_column(Text, nullable=False)
    content_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    status: Mapped[DocumentStatus] = mapped_column(
        _enum(DocumentStatus, "document_status"), nullable=False, default=DocumentStatus.READY)
    publication_status: Mapped[DocumentPublicationStatus] = mapped_column(
        _enum(DocumentPublicationStatus, "document_publication_status"), nullable=False,
        default=DocumentPublicationStatus.PUBLISHED)
    is_deleted: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    __table_args__ = (UniqueConstraint("knowledge_base_id", "original_name"),)


class DocumentChunk(Base):
    """A chunk of a document. ``is_current`` is False once re-ingestion replaced it (history kept)."""

    __tablename__ = "document_chunks"
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    knowledge_base_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("knowledge_bases.id", ondelete="CASCADE"), nullable=False)
    document_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("documents.id", ondelete="CASCADE"), index=True, nullable=False)
    ordinal: Mapped[int] = mapped_column(Integer, nullable=False)
    content: Mapped[str] = mapped_column(Text, nullable=False)
    content_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    char_start: Mapped[int] = mapped_column(Integer, nullable=False)
    char_end: Mapped[int] = mapped_column(Integer, nullable=False)
    content_tsvector: Mapped[str] = mapped_column(TSVECTOR, nullable=False)
    token_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    is_current: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    replaced_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = _now()
    __table_args__ = (
        Index("ix_document_chunks_kb_current", "knowledge_base_id", "is_current"),
        # a knowledge base's current chunks in id order with their document, from the index alone (0017: the
        # content version's scan)
        Index("ix_document_chunks_kb_current_id", "knowledge_base_id", "id", postgresql_include=["document_id"],
              postgresql_where=text("is_current")),
        Index("ix_document_chunks_tsv", "content_tsvector", postgresql_using="gin"))


class EmbeddingModel(Base):
    __tablename__ = "embedding_models"
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    dimension: Mapped[int] = mapped_column(Integer, nullable=False)
    backend: Mapped[str] = mapped_column(String(100), nullable=False)
    created_at: Mapped[datetime] = _now()
    endpoint = mapped_column(JSONB)  # backend "endpoint": its definition (knowledge_base/endpoint_embedding.py)
    __table_args__ = (CheckConstraint("(backend = 'endpoint') = (endpoint IS NOT NULL)",
                                      name="ck_embedding_models_endpoint"),)


class ChunkEmbedding(Base):
    """One embedding of one chunk by one model (the model name is recorded with every vector)."""

    __tablename__ = "chunk_embeddings"
    chunk_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("document_chunks.id", ondelete="CASCADE"), primary_key=True)
    model: Mapped[str] = mapped_column(ForeignKey("embedding_models.name"), primary_key=True)
    knowledge_base_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("knowledge_bases.id", ondelete="CASCADE"), nullable=False)
    embedding = mapped_column(Vector(), nullable=False)
    created_at: Mapped[datetime] = _now()
    # A knowledge base's vectors by chunk id and model, from the index alone (0017: the content version's scan);
    # its first column serves the cascade from a deleted knowledge base (without it, one scan of every vector). A
    # vector stays in its row up to a page's room (toast_tuple_target, 0016), not in the TOAST table, which every
    # read paid for.
    __table_args__ = (Index("ix_chunk_embeddings_kb_chunk_model", "knowledge_base_id", "chunk_id", "model"),
                      {"postgresql_with": {"toast_tuple_target": "8160"}})


class ChunkTerm(Base):
    """BM25 postings: term frequency of each lexeme of each *current* chunk (same lexemes as the tsvector)."""

    __tablename__ = "chunk_terms"
    knowledge_base_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    lexeme: Mapped[str] = mapped_column(Text, primary_key=True)
    chunk_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("document_chunks.id", ondelete="CASCADE"), primary_key=True)
    tf: Mapped[int] = mapped_column(Integer, nullable=False)
    # The cascade from document_chunks, retiring replaced chunks and the token_count update look postings up by
    # chunk: without it each deleted chunk scanned every posting (minutes for a small KB next to a big one).
    __table_args__ = (Index("ix_chunk_terms_chunk_id", "chunk_id"),)


class KnowledgeBaseTermStat(Base):
    """BM25 document frequency of each lexeme over the searchable chunks of a knowledge base (current chunks of
    READY, PUBLISHED, not deleted documents; kept equal to them after every ingestion and lifecycle change)."""

    __tablename__ = "knowledge_base_term_stats"
    knowledge_base_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("knowledge_bases.id", ondelete="CASCADE"), primary_key=True)
    lexeme: Mapped[str] = mapped_column(Text, primary_key=True)
    doc_freq: Mapped[int] = mapped_column(Integer, nullable=False)
