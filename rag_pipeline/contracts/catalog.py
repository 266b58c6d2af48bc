"""What there is to evaluate: the knowledge bases (counts, models, text mode, the strategies each can run) and
the datasets stored for them."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Applicability(BaseModel):
    """Whether one strategy can run on one knowledge base (docs/design.md §3.2): every model of every leg and
    stage is stored for it (or, for a cross-encoder, its local directory exists) and its text mode fits; when
    not, the one-line ``reason`` names the strategy and what is missing."""

    strategy: str
    runnable: bool
    reason: str | None = Field(description="Why it cannot run (None when runnable).")
    missing_models: list[str] = Field(description="Models (or cross-encoder directories) it needs and lacks.")


class KnowledgeBaseInfo(BaseModel):
    id: str
    name: str
    text_search: str = Field(description="Keyword text mode: simple, english, chinese or mixed.")
    chunk_size: int
    chunk_overlap: int
    documents: int
    searchable_documents: int
    current_chunks: int
    replaced_chunks: int
    embeddings: dict[str, int] = Field(description="Embeddings per model.")
    models: list[str]
    avg_chunk_tokens: float
    applicable_strategies: list[str] = Field(description="Strategies it can run (default of `evaluate`).")
    inapplicable_strategies: dict[str, str] = Field(description="The others, each with why.")
    datasets: int
    runs: int
    last_run_at: str | None
    kind: str = Field("project", description="project (ingested here), attached (your own tables, read only) or "
                      "external (a chunk catalogue of your system's documents).")
    catalogued_chunks: int = Field(0, description="Chunks of an external system's catalogue (their text known).")


class KnowledgeBaseList(BaseModel):
    knowledge_bases: list[KnowledgeBaseInfo]


class DatasetInfo(BaseModel):
    name: str
    knowledge_base: str
    dataset_id: str = Field(description="The latest version's id.")
    version: str = Field(description="The latest version's hash.")
    case_count: int
    source_path: str | None
    versions: int
    runs: int
    created_at: str | None
    last_seen_at: str | None
    last_run_at: str | None


class DatasetList(BaseModel):
    knowledge_base: str
    datasets: list[DatasetInfo]


class DatasetVersion(BaseModel):
    """One stored version of a dataset."""

    dataset_id: str
    name: str
    version: str = Field(description="The version's hash.")
    knowledge_base: str
    case_count: int


class StoredVersion(BaseModel):
    """One stored version of a dataset, as its history lists it."""

    dataset_id: str
    content_hash: str
    case_count: int
    source_path: str | None
    created_at: dt.datetime
    last_seen_at: dt.datetime


class UploadResult(DatasetVersion):
    """A stored dataset version (``created``: false when the same cases were stored before)."""

    relevant_ids: int
    relevant_ids_not_in_kb: int = Field(description="Relevant ids that are not chunks of the knowledge base.")
    k_min: int
    k_max: int
    created: bool


class ChunkText(BaseModel):
    """One chunk's text, looked up live (candidate snapshots never store it)."""

    chunk_id: str
    document_name: str
    ordinal: int
    is_current: bool
    content: str


class FoundChunk(BaseModel):
    model_config = ConfigDict(extra="forbid")

    """One chunk: its id (what ``relevant_chunk_ids`` holds), document, place and text."""

    rank: int = Field(ge=1, description="1-based place in this listing or search.")
    chunk_id: str = Field(description="document_chunks.id: the value a dataset labels.")
    document_id: str
    document_name: str
    ordinal: int = Field(description="The chunk's position in its document (0-based).")
    char_start: int = Field(description="Character span of the chunk in its document's text.")
    char_end: int
    matched: list[Literal["phrase", "keyword", "vector"]] = Field(
        description="How a search found it: the text literally, the keyword leg, the vector leg.")
    score: float | None = Field(description="Reciprocal-rank fusion score of the search (None: literal match only "
                                            "or no search).")
    snippet: str = Field(description="The text on one line, cut around the searched text.")
    text: str


class ChunkList(BaseModel):
    """A knowledge base's chunks listed or searched (``rag-pipeline chunks``, ``GET …/chunks``)."""

    model_config = ConfigDict(extra="forbid")

    knowledge_base: str
    knowledge_base_id: str
    search: str | None
    document: str | None = Field(description="The document the listing is narrowed to (its original name).")
    total: int = Field(description="Searchable chunks in scope (no search) or chunks found (search).")
    chunks: list[FoundChunk]
