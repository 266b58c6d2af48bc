"""Dagster resources: the knowledge-base database (``RAG_DATABASE_URL`` via ``EnvVar``, else the embedded server)."""

import dagster as dg
import sqlalchemy as sa

from rag_pipeline.settings import get_settings
from rag_pipeline.storage.engine import get_engine
from rag_pipeline.storage.snapshot_readers import reader_count
from rag_pipeline.storage.urls import normalize_url


class RagDatabase(dg.ConfigurableResource):
    """PostgreSQL + pgvector holding knowledge bases and evaluation runs.

    ``url`` (any PostgreSQL URL; the psycopg 3 driver is used; give it as ``dg.EnvVar`` so the UI never shows
    it), else the embedded server. The resource owns the engine: its pool holds the evaluation's parallel
    read connections (``readers``; 0 = ``RAG_EVAL_READERS``) plus its write connection. Migrations are applied
    on first use."""

    url: str | None = None
    readers: int = 0

    def reader_count(self, requested: int | None = None) -> int:
        """Read connections of one evaluation: ``requested``, else this resource's, else ``RAG_EVAL_READERS``."""
        return reader_count(requested or self.readers or None)

    def engine(self, readers: int | None = None) -> sa.Engine:
        url = normalize_url(self.url) if self.url else None
        return get_engine(url, readers=self.reader_count(readers))


def rag_database() -> RagDatabase:
    """The resource of the code location: ``RAG_DATABASE_URL`` as an ``EnvVar`` when it is set."""
    return RagDatabase(url=dg.EnvVar("RAG_DATABASE_URL") if get_settings().database_url else None)
