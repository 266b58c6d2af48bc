"""What the knowledge-base operations return: an ingestion, a BEIR import, a knowledge base's counts, and the
current runs a newer knowledge-base version made stale (docs/evaluating.md, "Lineage")."""

from __future__ import annotations

from pydantic import BaseModel, Field

SHORT = 12
"""Characters of a version shown in tables (like a git commit)."""


class IngestResult(BaseModel):
    """``rag-pipeline ingest``: what changed (timings: see :mod:`rag_pipeline.knowledge_base.ingestion`)."""

    knowledge_base: str
    knowledge_base_id: str
    documents_seen: int = 0
    documents_new: int = 0
    documents_changed: int = 0
    documents_rechunked: int = 0
    documents_unchanged: int = 0
    documents_removed: int = 0
    chunks_inserted: int = 0
    chunks_replaced: int = 0
    embeddings_written: int = 0
    timings: dict[str, float] = Field(default_factory=dict, description="Seconds per stage; the stages overlap.")
    warnings: list[str] = Field(default_factory=list)


class BeirImportResult(IngestResult):
    """``rag-pipeline import-beir``: the ingestion, the dataset file written, and what was skipped (as in the
    file's ``metadata``)."""

    dataset_out: str
    cases: int
    grades: str = Field(description="graded or binary.")
    skipped_queries: list[dict]
    skipped_documents: list[dict]
    dropped_labels: list[dict] = Field(description="Judgements of skipped documents.")
    zero_grades_omitted: list[str]


class KnowledgeBaseStats(BaseModel):
    """``rag-pipeline kb``: a knowledge base's counts and content version, read in one snapshot."""

    knowledge_base: str
    knowledge_base_id: str
    text_search: str
    documents: int
    searchable_documents: int
    current_chunks: int
    replaced_chunks: int
    embeddings: dict[str, int] = Field(description="Embeddings per model.")
    avg_chunk_tokens: float
    version: str
    kind: str = Field("project", description="project (ingested here) or external (a chunk catalogue only).")
    catalogued_chunks: int = Field(0, description="Chunks of the external system's catalogue (their text known; "
                                   "rag-pipeline kb catalogue, or an HTTP retriever's texts).")


class CatalogueResult(BaseModel):
    """``rag-pipeline kb catalogue``: a corpus file loaded as a knowledge base's chunk catalogue."""

    knowledge_base: str
    knowledge_base_id: str
    kind: str = "external"
    created: bool = Field(description="The knowledge base was created (of kind external) by this command.")
    file: str
    format: str = Field(description="beir (corpus.jsonl: _id, title, text) or jsonl (id, text, optional title).")
    documents: int = Field(description="Documents of the file, all catalogued.")
    catalogued: int = Field(description="Chunks of the catalogue now.")
    dropped: int = Field(description="Chunks catalogued before that the file no longer holds: their text was "
                         "dropped (a derived id stays remembered for exports).")
    seconds: float


class KnowledgeBaseVersion(BaseModel):
    """A knowledge base's content version (:mod:`rag_pipeline.knowledge_base.versions`)."""

    knowledge_base: str
    knowledge_base_id: str
    version: str = Field(description="64 hex characters.")
    searchable_chunks: int
    text_search: str
    embeddings: dict[str, int] = Field(default_factory=dict, description="Searchable chunks with a vector, per model.")

    @property
    def short(self) -> str:
        return self.version[:SHORT]


class StaleRun(BaseModel):
    """A current run that measured another version of its knowledge base than the one it has now."""

    run_id: str
    dataset: str
    knowledge_base: str
    strategy_version: str
    measured_version: str | None = Field(description="None: a run made before versions were recorded.")
    current_version: str
