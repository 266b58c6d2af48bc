"""An attached knowledge base: the user's own PostgreSQL tables, read only (docs/evaluating.md, "Your own
retriever"). The mapping names the table and columns that hold each part of a chunk; its default is the original
design's schema (``documents`` / ``document_chunks``, docs/design.md §3)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

IDENTIFIER = re.compile(r"^[^\x00]{1,127}$")
"""A name as the user spelled it (quoted when used, so any character but NUL); a table may be ``schema.table``."""


class MappingModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FilterCondition(MappingModel):
    """``<column> = <value>`` on the documents table (or the chunks table when there is none)."""

    column: str
    equals: str | bool | int


def _original_filter() -> list[FilterCondition]:
    return [FilterCondition(column="status", equals="READY"),
            FilterCondition(column="publication_status", equals="PUBLISHED"),
            FilterCondition(column="is_deleted", equals=False)]


class AttachedMapping(MappingModel):
    """Where the chunks are. Table names may be ``schema.table``; every name is quoted when used (never spliced)."""

    chunks_table: str = "document_chunks"
    chunk_id: str = Field("id", description="The chunk id (labels are these values, as text).")
    document_id: str = "document_id"
    text: str = "content"
    embedding: str | None = Field("embedding", description="A pgvector column; null: no vector leg.")
    embedding_model: str = Field("use-multilingual-v3", description="The project's name of the model that made the "
                                 "stored vectors (it embeds the questions).")
    tsvector: str | None = Field("content_tsvector", description="A tsvector column; null: to_tsvector(text) is "
                                 "computed per query (no index can serve it).")
    text_search: str = Field("simple", description="The project's text mode of the questions (simple, english, "
                             "chinese, mixed): how the stored tsvector was made.")
    documents_table: str | None = Field("documents", description="null: the filter is on the chunks table.")
    documents_key: str = Field("id", description="The documents table's id column (joined to document_id).")
    document_name: str | None = Field("original_name", description="The documents table's name column (optional).")
    document_filter: list[FilterCondition] = Field(default_factory=_original_filter,
                                                   description="What retrieval may return (all must hold).")
    knowledge_base_column: str | None = Field(None, description="A chunks-table column selecting one knowledge base.")
    knowledge_base_value: str | None = None

    @field_validator("chunks_table", "chunk_id", "document_id", "text", "embedding", "tsvector", "documents_table",
                     "documents_key", "document_name", "knowledge_base_column")
    @classmethod
    def _identifier(cls, value: str | None) -> str | None:
        if value is not None and not IDENTIFIER.match(value):
            raise ValueError("a table or column name of 1-127 characters without NUL")
        return value

    def tables(self) -> list[str]:
        return [self.chunks_table] + ([self.documents_table] if self.documents_table else [])


class AttachedContent(BaseModel):
    """What an evaluation of an attached knowledge base saw: the chunk table's row count and a content
    fingerprint (SHA-256 over every row's mapped columns and filter result, in chunk-id order)."""

    table: str
    rows: int
    fingerprint: str


class AttachResult(BaseModel):
    """``rag-pipeline kb attach``: the knowledge base recorded (never the URL's password) and what was checked."""

    knowledge_base: str
    knowledge_base_id: str
    kind: str = "attached"
    url_env: str
    url: str = Field(description="The URL with its password masked.")
    mapping: AttachedMapping
    content: AttachedContent
    warnings: list[str] = Field(default_factory=list)
