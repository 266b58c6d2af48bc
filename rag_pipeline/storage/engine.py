"""Connections: which PostgreSQL (``RAG_DATABASE_URL``, else the embedded server with databases ``rag`` and
``dagster``), creating its databases, engines, schema migrations and the per-KB HNSW indexes."""

from __future__ import annotations

import functools
import hashlib
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from rag_pipeline.contracts.errors import EXIT_USER_ERROR, DatabaseUnavailableError
from rag_pipeline.settings import DAGSTER_DATABASE, KB_DATABASE, get_settings
from rag_pipeline.storage import embedded_server as embedded_pg
from rag_pipeline.storage import queries
from rag_pipeline.storage.urls import DatabaseError, mask_secrets, mask_url, normalize_url, with_database, with_driver


class DatabaseUnreachableError(DatabaseUnavailableError, DatabaseError):
    """The database did not answer (refused, dropped, timed out): transient, worth a bounded retry. HTTP 503;
    the CLI exits 2, as for any configuration that points nowhere."""

    exit_code = EXIT_USER_ERROR


class DatabaseAuthenticationError(DatabaseUnavailableError, DatabaseError):
    """The server answered but refused the credentials of the URL: a database failure (exit 3, HTTP 503), with
    the password masked in the message."""


TRANSIENT_ERRORS: tuple[type[Exception], ...] = (DatabaseUnavailableError, sa.exc.OperationalError,
                                                     sa.exc.InterfaceError)
"""The database did not answer or dropped the connection: worth a bounded retry."""


def _unreachable(url: str, exc: BaseException) -> DatabaseUnavailableError:
    reason = first_line(exc)
    if "password authentication failed" in reason or "no password supplied" in reason:
        return DatabaseAuthenticationError(f"the database {mask_url(url)} refused the password: {reason} (check the "
                                           "password in RAG_DATABASE_URL; `rag-pipeline db password` prints the "
                                           "embedded server's)")
    return DatabaseUnreachableError(f"cannot reach the database {mask_url(url)}: {reason}")


def database_url() -> str:
    """SQLAlchemy URL (psycopg 3 driver) of the knowledge-base database; starts the embedded server if needed."""
    explicit = get_settings().database_url
    if explicit:
        return normalize_url(explicit)
    uri = embedded_pg.start()
    url = with_driver(with_database(uri, KB_DATABASE), "psycopg")
    _create_database_if_missing(uri, KB_DATABASE)
    return url


def dagster_database_url(*, create: bool = True) -> str:
    """URL for dagster-postgres (``postgresql+psycopg2://``): ``RAG_DAGSTER_PG_URL``, else the database
    ``dagster`` next to the knowledge-base database (created when missing; ``create=False`` only names it).
    The knowledge-base database itself is refused: both keep an Alembic ``alembic_version`` table."""
    settings = get_settings()
    if settings.dagster_pg_url:
        url = with_driver(settings.dagster_pg_url, "psycopg2")
        if settings.database_url and _same_database(url, settings.database_url):
            raise DatabaseError(f"RAG_DAGSTER_PG_URL names the knowledge-base database of RAG_DATABASE_URL "
                                f"({mask_url(url)}): Dagster needs a database of its own, e.g. "
                                f"{mask_url(with_database(url, DAGSTER_DATABASE))}")
        return url
    if settings.database_url:
        kb_url = normalize_url(settings.database_url)
        if make_url(kb_url).database == DAGSTER_DATABASE:
            raise DatabaseError(f"RAG_DATABASE_URL names the database {DAGSTER_DATABASE!r}, which Dagster's storage "
                                "would share: set RAG_DAGSTER_PG_URL to another database")
        if create:
            _create_sibling_database(kb_url, DAGSTER_DATABASE)
        return with_driver(with_database(kb_url, DAGSTER_DATABASE), "psycopg2")
    uri = embedded_pg.start()
    _create_database_if_missing(uri, DAGSTER_DATABASE)
    return with_driver(with_database(uri, DAGSTER_DATABASE), "psycopg2")


def _same_database(a: str, b: str) -> bool:
    ua, ub = make_url(normalize_url(a)), make_url(normalize_url(b))
    return (ua.host, ua.port or 5432, ua.database, ua.query.get("host")) == \
        (ub.host, ub.port or 5432, ub.database, ub.query.get("host"))


def _create_sibling_database(kb_url: str, name: str) -> None:
    """``CREATE DATABASE name`` on the server of ``kb_url`` when it is missing; a role that may not create one
    gets a message saying what to set instead."""
    try:
        _create_database_if_missing(kb_url, name)
    except sa.exc.ProgrammingError as exc:  # permission denied
        raise DatabaseError(f"Dagster's storage needs the database {name!r} next to {mask_url(kb_url)}, and "
                            f"creating it failed ({first_line(exc)}): create it, or set RAG_DAGSTER_PG_URL") from None
    except sa.exc.OperationalError as exc:
        raise _unreachable(kb_url, exc) from None


def _create_database_if_missing(admin_uri: str, name: str) -> None:
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        raise DatabaseError(f"invalid database name {name!r}")
    engine = sa.create_engine(with_driver(admin_uri, "psycopg"), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            queries.create_database_if_missing(conn, name)
    finally:
        engine.dispose()


DEFAULT_POOL_SIZE = 5

_ENGINES: list[Engine] = []


BINARY_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
"""The first 11 bytes of ``COPY ... (FORMAT BINARY)`` data; an int32 of flags and an int32 header extension length
follow, then the rows, then the trailer int16 -1."""


def driver_connection(conn: sa.Connection) -> psycopg.Connection:
    """The psycopg 3 connection of the transaction ``conn`` (for COPY and pgvector's adapters)."""
    raw = conn.connection.driver_connection
    assert raw is not None, "the connection is closed"
    return raw


def dispose_engines() -> None:
    """Close every pooled connection of every engine this process made (before stopping the server)."""
    for engine in _ENGINES:
        engine.dispose()


def forget_parent_connections() -> None:
    """In a forked child process: every engine this process inherited starts a new, empty pool; the parent's
    connections stay the parent's (never used, never closed here)."""
    for engine in _ENGINES:
        engine.dispose(close=False)


@functools.cache
def _engine_for(url: str, pool_size: int) -> Engine:
    # connect_timeout: a host that does not answer fails in seconds, not after the OS TCP timeout
    engine = sa.create_engine(url, pool_pre_ping=True, pool_size=pool_size, max_overflow=5,
                              connect_args={"connect_timeout": 10})

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        try:
            from pgvector.psycopg import register_vector  # noqa: PLC0415

            from rag_pipeline.storage import vector_params  # noqa: PLC0415 - numpy only once connected

            register_vector(dbapi_conn)
            vector_params.register(dbapi_conn)
        except Exception:  # noqa: BLE001 - the extension does not exist before the first migration
            dbapi_conn.rollback()

    _ENGINES.append(engine)
    return engine


@functools.cache
def read_only_engine(url: str) -> Engine:
    """An engine on a database of the user's (an attached knowledge base) whose sessions are read-only
    (``default_transaction_read_only``; each transaction also says ``SET TRANSACTION READ ONLY``), so even a role
    with write rights never writes. Never migrated; the URL comes from an environment variable, never stored."""
    url = normalize_url(url)
    engine = sa.create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=2, connect_args={
        "connect_timeout": 10, "options": "-c default_transaction_read_only=on",
        "application_name": "rag-pipeline (read only)"})

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        try:
            from pgvector.psycopg import register_vector  # noqa: PLC0415

            from rag_pipeline.storage import vector_params  # noqa: PLC0415 - numpy only once connected

            register_vector(dbapi_conn)
            vector_params.register(dbapi_conn)
        except Exception:  # noqa: BLE001 - a database without pgvector: the mapping check names it
            dbapi_conn.rollback()

    _ENGINES.append(engine)
    return engine


def get_engine(url: str | None = None, *, migrate: bool = True, readers: int = 0) -> Engine:
    """The engine for ``url`` (default :func:`database_url`), schema upgraded to head unless ``migrate=False``; one
    per URL and pool size (``readers`` + 3 connections, at least :data:`DEFAULT_POOL_SIZE`)."""
    url = url or database_url()
    engine = _engine_for(url, max(DEFAULT_POOL_SIZE, readers + 3))
    if migrate:
        try:
            upgrade(engine)
        except sa.exc.OperationalError as exc:
            raise _unreachable(url, exc) from None
    return engine


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (its driver error's, if any), secrets masked; else its type."""
    text = mask_secrets(str(getattr(exc, "orig", None) or exc)).strip()
    return text.splitlines()[0] if text else type(exc).__name__


MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def alembic_config(url: str):
    """Alembic configuration for ``url``: the migrations shipped inside the package (works from a wheel)."""
    from alembic.config import Config  # noqa: PLC0415

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


_MIGRATED: set[str] = set()


def upgrade(engine: Engine) -> None:
    """Apply the Alembic migrations up to head (once per process; serialised by an advisory lock)."""
    key = engine.url.render_as_string(hide_password=False)
    if key in _MIGRATED:
        return
    from alembic import command  # noqa: PLC0415

    with engine.begin() as conn, queries.migration_lock(conn):
        cfg = alembic_config(key)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    engine.dispose()  # connections opened before the extension existed lack the vector type
    _MIGRATED.add(key)


@contextmanager
def knowledge_base_lock(engine: Engine, name: str) -> Iterator[None]:
    """Hold knowledge base ``name``'s advisory lock for the ``with`` block, on an autocommit connection of its
    own, so two ingestions of one knowledge base take turns; a connection whose unlock fails is closed."""
    with engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        try:
            queries.lock_knowledge_base(conn, name)
        except BaseException:
            conn.invalidate()  # interrupted while waiting: never return a connection that may hold the lock
            raise
        try:
            yield
        finally:
            try:
                queries.unlock_knowledge_base(conn, name)
            except sa.exc.DBAPIError:  # a broken connection: closing it is the unlock (the block's error goes on)
                conn.invalidate()
            except BaseException:
                conn.invalidate()
                raise


def ensure_embedding_model(conn: sa.Connection, name: str, dimension: int, backend: str,
                           knowledge_base_id=None) -> None:
    """Register an embedding model; with ``knowledge_base_id``, also create that knowledge base's own HNSW index
    of the model if it has none (:func:`build_vector_index`, docs/design.md §6.1)."""
    queries.model_literal(name)  # a model name is spliced into index predicates: [A-Za-z0-9._/-]+ only
    registered = queries.register_model(conn, name, dimension, backend)
    if registered != dimension:
        raise DatabaseError(f"embedding model {name!r} is registered with dimension {registered}, not {dimension}")
    if knowledge_base_id is not None and vector_index_state(conn, name, knowledge_base_id) != "valid":
        build_vector_index(conn, name, dimension, knowledge_base_id)


def vector_index_state(conn: sa.Connection, model: str, knowledge_base_id) -> str | None:
    """``"valid"``, ``"invalid"`` (a build that did not finish) or ``None`` (no index) for the KB's own HNSW index
    of ``model``."""
    valid = queries.index_validity(conn, hnsw_index_name(model, knowledge_base_id))
    return None if valid is None else ("valid" if valid else "invalid")


HNSW_BUILD_MEMORY_CAP_MB = 2048
"""The most ``maintenance_work_mem`` a bulk HNSW build asks for (the server's own setting is kept when larger)."""


def build_vector_index(conn: sa.Connection, model: str, dimension: int, knowledge_base_id) -> None:
    """Create (or rebuild, when invalid) the KB's own partial HNSW cosine index of ``model`` in ``conn``'s
    transaction, in memory (``maintenance_work_mem`` sized to the graph, at most :data:`HNSW_BUILD_MEMORY_CAP_MB`).
    Holds a SHARE lock on ``chunk_embeddings`` until the transaction ends, so keep it short."""
    queries.model_literal(model)  # a model name is spliced into index predicates: [A-Za-z0-9._/-]+ only
    kb = uuid.UUID(str(knowledge_base_id))
    index = hnsw_index_name(model, kb)
    rows = queries.model_vector_count(conn, model, kb)
    need_mb = min(HNSW_BUILD_MEMORY_CAP_MB, 64 + int(rows * (int(dimension) * 4 + 600) * 1.25) // 2**20)
    queries.raise_maintenance_work_mem(conn, need_mb)
    if vector_index_state(conn, model, kb) == "invalid":
        queries.reindex(conn, index)
        return
    queries.create_vector_index(conn, index, dimension, model, kb)


HNSW_INDEX_PREFIX = "ix_emb_hnsw_"


def hnsw_index_name(model: str, knowledge_base_id) -> str:
    """``ix_emb_hnsw_<knowledge base id hex>_<8 hex of the model name's md5>`` (63 characters at most)."""
    digest = hashlib.md5(model.encode("utf-8"), usedforsecurity=False).hexdigest()[:8]
    return f"{HNSW_INDEX_PREFIX}{uuid.UUID(str(knowledge_base_id)).hex}_{digest}"
