"""Dagster resources: the knowledge-base database (RAG_DATABASE_URL or the embedded server)."""


import dagster as dg
import sqlalchemy as sa

from rag_pipeline.storage.engine import get_engine, normalize_url


class RagDatabase(dg.ConfigurableResource):
    """PostgreSQL + pgvector holding knowledge bases and evaluation runs.

    ``url`` (any PostgreSQL URL; the psycopg 3 driver is used) → else ``RAG_DATABASE_URL`` → else the embedded
    server; migrations are applied on first use.
    """

    url: str = ""

    def engine(self) -> sa.Engine:
        return get_engine(normalize_url(self.url)) if self.url else get_engine()
