"""The database as the front ends see it: the engine, its URLs (secrets masked), the embedded server, the
read-connection count, and which database errors are transient.

The front ends reach storage only through this module (``rag-pipeline db``, the Dagster resource, the HTTP
health check and dependencies); the operations on the data are in the other service modules.
"""

from __future__ import annotations

import sqlalchemy as sa

from rag_pipeline.contracts.errors import DatabaseUnavailableError
from rag_pipeline.storage import embedded_server
from rag_pipeline.storage.engine import dagster_database_url, database_url, get_engine
from rag_pipeline.storage.files import write_atomic as write_atomic
from rag_pipeline.storage.snapshot_readers import reader_count
from rag_pipeline.storage.urls import DatabaseError, libpq_url, mask_secrets, mask_url, normalize_url

__all__ = ["TRANSIENT_ERRORS", "DatabaseError", "dagster_database_url", "database_url", "embedded_server",
           "get_engine", "libpq_url", "mask_secrets", "mask_url", "normalize_url", "reader_count"]

TRANSIENT_ERRORS: tuple[type[Exception], ...] = (DatabaseUnavailableError, sa.exc.OperationalError,
                                                 sa.exc.InterfaceError)
"""The database did not answer or dropped the connection: worth a bounded retry."""
