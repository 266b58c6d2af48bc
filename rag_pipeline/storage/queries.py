"""The storage stage's SQL: databases, advisory locks, embedding models, HNSW indexes, snapshots, on the caller's
connection. Identifiers cannot be bind parameters; the few spliced in are checked where they are spliced."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from rag_pipeline.storage.urls import DatabaseError

_SNAPSHOT_ID = re.compile(r"[0-9A-F]+-[0-9A-F]+(-[0-9]+)?")
_INDEX_NAME = re.compile(r"[a-z0-9_]+")

MODEL_DIMENSION_SQL = "SELECT dimension FROM embedding_models WHERE name = :model"

_FREE_CONNECTIONS_SQL = (
    "SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int "
    "- coalesce(current_setting('reserved_connections', true)::int, 0) - (SELECT count(*) FROM pg_stat_activity "
    "WHERE backend_type = 'client backend')")


def create_database_if_missing(conn: sa.Connection, name: str) -> None:
    """``CREATE DATABASE`` unless it exists (or another process creates it meanwhile)."""
    if conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).scalar():
        return
    try:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.ProgrammingError as exc:  # created concurrently by another process
        if "already exists" not in str(exc):
            raise


@contextmanager
def migration_lock(conn: sa.Connection) -> Iterator[None]:
    conn.execute(sa.text("SELECT pg_advisory_lock(726354)"))
    try:
        yield
    finally:
        conn.execute(sa.text("SELECT pg_advisory_unlock(726354)"))


KNOWLEDGE_BASE_LOCK = 726356
"""First key of the per-knowledge-base advisory locks (the second: ``hashtext`` of the name)."""


def lock_knowledge_base(conn: sa.Connection, name: str) -> None:
    """Wait for, then take, knowledge base ``name``'s session advisory lock (two names may share one: they take
    turns, nothing worse)."""
    conn.execute(sa.text("SELECT pg_advisory_lock(:c, hashtext(:n))"), {"c": KNOWLEDGE_BASE_LOCK, "n": name})


def unlock_knowledge_base(conn: sa.Connection, name: str) -> None:
    conn.execute(sa.text("SELECT pg_advisory_unlock(:c, hashtext(:n))"), {"c": KNOWLEDGE_BASE_LOCK, "n": name})


def model_dimension(conn: sa.Connection, model: str) -> int | None:
    return conn.execute(sa.text(MODEL_DIMENSION_SQL), {"model": model}).scalar()


def lock_model_registry(conn: sa.Connection) -> None:
    """One registration of an embedding model at a time (an advisory lock until the transaction ends)."""
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(726355)"))


def register_model(conn: sa.Connection, name: str, dimension: int, backend: str) -> int:
    """The dimension model ``name`` is registered with, registering it with ``dimension`` when new; one
    registration at a time (:func:`lock_model_registry`)."""
    lock_model_registry(conn)
    stored = model_dimension(conn, name)
    if stored is None:
        conn.execute(sa.text("INSERT INTO embedding_models (name, dimension, backend) VALUES (:n, :d, :b) "
                             "ON CONFLICT (name) DO NOTHING"), {"n": name, "d": dimension, "b": backend})
    return dimension if stored is None else stored


_MODEL_COLUMNS = "name, dimension, backend, endpoint"


def embedding_model_row(conn: sa.Connection, name: str) -> sa.Row | None:
    """``(name, dimension, backend, endpoint)`` of model ``name`` (``endpoint``: the jsonb definition or null)."""
    return conn.execute(sa.text(f"SELECT {_MODEL_COLUMNS} FROM embedding_models WHERE name = :n"), {"n": name}).first()


def embedding_model_rows(conn: sa.Connection) -> list[sa.Row]:
    """Every registered model's ``(name, dimension, backend, endpoint)``, by name."""
    return list(conn.execute(sa.text(f"SELECT {_MODEL_COLUMNS} FROM embedding_models ORDER BY name")))


def save_endpoint_model(conn: sa.Connection, name: str, dimension: int, endpoint_json: str) -> None:
    """Insert model ``name`` of backend ``endpoint``, or replace its definition (the caller checked it may)."""
    conn.execute(sa.text("INSERT INTO embedding_models (name, dimension, backend, endpoint) "
                         "VALUES (:n, :d, 'endpoint', CAST(:e AS jsonb)) "
                         "ON CONFLICT (name) DO UPDATE SET endpoint = EXCLUDED.endpoint"),
                 {"n": name, "d": dimension, "e": endpoint_json})


def index_validity(conn: sa.Connection, index: str) -> bool | None:
    """``pg_index.indisvalid`` of the index named ``index``; ``None`` when there is no such index."""
    return conn.execute(sa.text("SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(:i)"),
                        {"i": index}).scalar()


def model_vector_count(conn: sa.Connection, model: str, knowledge_base_id) -> int:
    return conn.execute(sa.text("SELECT count(*) FROM chunk_embeddings WHERE model = :m AND knowledge_base_id = :kb"),
                        {"m": model, "kb": knowledge_base_id}).scalar_one()


def raise_maintenance_work_mem(conn: sa.Connection, megabytes: int) -> None:
    """``maintenance_work_mem`` of at least ``megabytes`` for this transaction (a larger setting is kept)."""
    current = conn.execute(sa.text("SELECT setting::bigint * 1024 / 1048576 FROM pg_settings "
                                   "WHERE name = 'maintenance_work_mem'")).scalar_one()  # setting in kB
    if megabytes > current:
        conn.execute(sa.text("SELECT set_config('maintenance_work_mem', :v, true)"), {"v": f"{int(megabytes)}MB"})


def model_literal(name: str) -> str:
    """``name`` if it may be spliced into SQL as a quoted literal (``[A-Za-z0-9._/-]+``)."""
    if not re.fullmatch(r"[A-Za-z0-9._/-]+", name):
        raise DatabaseError(f"invalid embedding model name {name!r}")
    return name


def _index(name: str) -> str:
    if not _INDEX_NAME.fullmatch(name):
        raise DatabaseError(f"invalid index name {name!r}")
    return name


def create_vector_index(conn: sa.Connection, index: str, dimension: int, model: str, knowledge_base_id) -> None:
    """The partial HNSW cosine index of one knowledge base × model on ``embedding::vector(dimension)``."""
    conn.execute(sa.text(f"CREATE INDEX IF NOT EXISTS {_index(index)} ON chunk_embeddings "
                         f"USING hnsw ((embedding::vector({int(dimension)})) vector_cosine_ops) "
                         f"WHERE model = '{model_literal(model)}' "
                         f"AND knowledge_base_id = '{uuid.UUID(str(knowledge_base_id))}'"))


def reindex(conn: sa.Connection, index: str, *, concurrently: bool = False) -> None:
    """``REINDEX INDEX`` (``CONCURRENTLY``: outside a transaction, searches go on)."""
    conn.execute(sa.text(f"REINDEX INDEX {'CONCURRENTLY ' if concurrently else ''}{_index(index)}"))


def other_snapshot_holders(conn: sa.Connection) -> int:
    """Other backends of this database holding a snapshot (a concurrent REINDEX would wait for them)."""
    return conn.execute(sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                "AND pid <> pg_backend_pid() AND backend_xmin IS NOT NULL")).scalar_one()


@contextmanager
def lock_timeout(conn: sa.Connection, seconds: float) -> Iterator[None]:
    """``lock_timeout`` for the block, then back to the connection's own setting (not after an error)."""
    conn.execute(sa.text("SELECT set_config('lock_timeout', :t, false)"), {"t": f"{seconds}s"})
    yield
    conn.execute(sa.text("RESET lock_timeout"))


def free_connections(conn: sa.Connection) -> int:
    return conn.execute(sa.text(_FREE_CONNECTIONS_SQL)).scalar_one()


def export_snapshot(conn: sa.Connection) -> str:
    return conn.execute(sa.text("SELECT pg_export_snapshot()")).scalar_one()


def import_snapshot(conn: sa.Connection, snapshot_id: str) -> None:
    """The first statement of ``conn``'s REPEATABLE READ transaction: see the snapshot ``snapshot_id``."""
    if not _SNAPSHOT_ID.fullmatch(snapshot_id):  # it is spliced into SQL below
        raise RuntimeError(f"unexpected snapshot id {snapshot_id!r}")
    conn.exec_driver_sql(f"SET TRANSACTION SNAPSHOT '{snapshot_id}'")
