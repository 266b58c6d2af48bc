"""Several read connections that see one and the same snapshot of the database.

The first connection's REPEATABLE READ transaction exports its snapshot (``pg_export_snapshot()``), the others
import it, so an evaluation on ``n`` connections sees one knowledge base even while it is re-ingested. Read only,
rolled back at the end; threads borrow a connection with :meth:`SnapshotReaders.borrow`."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.settings import get_settings
from rag_pipeline.storage import queries


def reader_count(requested: int | None = None) -> int:
    """``requested``, else ``RAG_EVAL_READERS`` (default 2; :mod:`rag_pipeline.settings`), at least 1."""
    if requested is None:
        requested = get_settings().eval_readers
    if requested < 1:
        raise ValueError(f"the number of read connections must be at least 1, got {requested}")
    return requested


class TooManyReadersError(BadInputError, ValueError):
    """More read connections than the engine's pool or the server can give; the message says how many fit."""


def check_capacity(engine: sa.Engine, readers: int, extra: int) -> None:
    """Refuse, before anything is written, ``readers`` + ``extra`` connections that exceed the engine's pool or
    the server's free connection slots."""
    needed = readers + extra
    bounded = engine.pool if isinstance(engine.pool, sa.QueuePool) else None  # NullPool, StaticPool: no bound
    if bounded is not None:
        capacity = bounded.size() + max(bounded._max_overflow, 0)
        if needed > capacity:
            raise TooManyReadersError(
                f"--readers {readers} needs {needed} database connections ({readers} readers + {extra}) but the "
                f"engine's connection pool holds at most {capacity}; use at most {capacity - extra} readers")
    with engine.connect() as conn:
        free = queries.free_connections(conn)
    free += bounded.checkedin() if bounded is not None else 0  # the pool's idle ones count as in use but serve us
    if needed > free + 1:  # + 1: the connection that asked is back in the pool
        raise TooManyReadersError(
            f"--readers {readers} needs {needed} database connections ({readers} readers + {extra}) but the "
            f"server has {free + 1} free (max_connections minus reserved and in-use ones); use at most "
            f"{max(free + 1 - extra, 1)} readers or raise max_connections")


class SnapshotReaders:
    def __init__(self, connections: list[sa.Connection], snapshot_id: str | None):
        self.connections = connections
        self.snapshot_id = snapshot_id
        self._free: queue.Queue[sa.Connection] = queue.Queue()
        for conn in connections:
            self._free.put(conn)

    def __len__(self) -> int:
        return len(self.connections)

    @contextmanager
    def borrow(self) -> Iterator[sa.Connection]:
        conn = self._free.get()
        try:
            yield conn
        finally:
            self._free.put(conn)


@contextmanager
def snapshot_readers(engine: sa.Engine, n: int) -> Iterator[SnapshotReaders]:
    """``n`` REPEATABLE READ connections sharing the first one's snapshot (see the module docstring)."""
    connections: list[sa.Connection] = []
    try:
        first = engine.connect().execution_options(isolation_level="REPEATABLE READ")
        connections.append(first)
        first.begin()
        snapshot_id = None
        if n > 1:
            snapshot_id = queries.export_snapshot(first)
            for _ in range(n - 1):
                conn = engine.connect().execution_options(isolation_level="REPEATABLE READ")
                connections.append(conn)
                conn.begin()
                queries.import_snapshot(conn, snapshot_id)
        yield SnapshotReaders(connections, snapshot_id)
    finally:
        for conn in reversed(connections):
            conn.close()  # rolls the read-only transaction back
