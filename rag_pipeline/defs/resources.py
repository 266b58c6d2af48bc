"""Dagster resources: the knowledge-base database (RAG_DATABASE_URL or the embedded server)."""


import os

import dagster as dg
import sqlalchemy as sa

from rag_pipeline.core.db import get_engine


class RagDatabase(dg.ConfigurableResource):
    """PostgreSQL + pgvector holding knowledge bases and evaluation runs.

    ``url`` empty → ``RAG_DATABASE_URL`` → the embedded server; migrations are applied on first use.
    """

    url: str = ""

    def engine(self) -> sa.Engine:
        if self.url:
            os.environ.setdefault("RAG_DATABASE_URL", self.url)
            return get_engine(self.url if "+" in self.url.split("://")[0] else None)
        return get_engine()
