"""The content version of a knowledge base: what a retrieval over it can see, as one hash.

SHA-256 over the text-search mode and, in chunk id order, every searchable chunk (docs/design.md §3.3) with its
embedding models: it changes exactly when a retrieval could return something else. Runs record it; the Dagster
``knowledge_base`` asset uses it as its data version."""

from __future__ import annotations

import hashlib

import sqlalchemy as sa

from rag_pipeline.contracts.knowledge_base import KnowledgeBaseVersion
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.knowledge_base.queries import documents as queries


def content_version(conn: sa.Connection, name_or_id) -> KnowledgeBaseVersion:
    """The current version of a knowledge base (name or id); an unknown one raises
    :class:`~rag_pipeline.knowledge_base.lifecycle.KnowledgeBaseError`."""
    kb = resolve_knowledge_base(conn, str(name_or_id))
    row, models = queries.content_digest(conn, kb.id)
    version = hashlib.sha256(f"rag-kb-v1\ntext_search={kb.text_search}\n{row.digest}".encode()).hexdigest()
    return KnowledgeBaseVersion(knowledge_base=kb.name, knowledge_base_id=str(kb.id), version=version,
                                searchable_chunks=int(row.searchable_chunks), text_search=kb.text_search,
                                embeddings=models)


def all_versions(conn: sa.Connection) -> list[KnowledgeBaseVersion]:
    """The version of every knowledge base, by name."""
    return [content_version(conn, name) for name in queries.knowledge_base_names(conn)]
