"""The content version of a knowledge base: what a retrieval over it can see, as one hash.

``version`` = SHA-256 over the text-search mode and, in chunk id order, every **searchable** chunk (docs/design.md
§3.3) with the embedding models it has a vector of. A chunk id derives from the knowledge base, the document and
the chunk's text and span, so the version changes exactly when a retrieval could return something else (BM25
statistics included); re-ingesting an unchanged folder keeps it. Runs record the version they measured, read in
their own snapshot; the Dagster ``knowledge_base`` asset uses it as its data version.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import sqlalchemy as sa

from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.knowledge_base.queries import documents as queries

SHORT = 12
"""Characters of a version shown in tables (like a git commit)."""

@dataclass(frozen=True)
class KnowledgeBaseVersion:
    knowledge_base: str
    knowledge_base_id: str
    version: str
    """64 hex characters."""
    searchable_chunks: int
    text_search: str
    embeddings: dict[str, int] = field(default_factory=dict)
    """Searchable chunks with a vector, per embedding model."""

    @property
    def short(self) -> str:
        return self.version[:SHORT]

    def as_dict(self) -> dict:
        return {"knowledge_base": self.knowledge_base, "knowledge_base_id": self.knowledge_base_id,
                "version": self.version, "searchable_chunks": self.searchable_chunks,
                "text_search": self.text_search, "embeddings": dict(self.embeddings)}


def content_version(conn: sa.Connection, name_or_id) -> KnowledgeBaseVersion:
    """The current version of a knowledge base (name or id); an unknown one raises
    :class:`~rag_pipeline.knowledge_base.lifecycle.KnowledgeBaseError`."""
    kb = resolve_knowledge_base(conn, str(name_or_id))
    row, models = queries.content_digest(conn, kb.id)
    version = hashlib.sha256(f"rag-kb-v1\ntext_search={kb.text_search}\n{row.digest}".encode()).hexdigest()
    return KnowledgeBaseVersion(kb.name, str(kb.id), version, int(row.searchable_chunks), kb.text_search, models)


def all_versions(conn: sa.Connection) -> list[KnowledgeBaseVersion]:
    """The version of every knowledge base, by name."""
    return [content_version(conn, name) for name in queries.knowledge_base_names(conn)]
