"""Several read connections that see one and the same snapshot of the database.

An evaluation reads the knowledge base on ``n`` connections at once (the retrieval legs of different
batches run in parallel, one PostgreSQL backend each) and must still see *one* consistent knowledge base,
even if it is re-ingested meanwhile. The first connection opens a REPEATABLE READ transaction and
exports its snapshot (``pg_export_snapshot()``); every other connection imports it as the first statement
of its own REPEATABLE READ transaction (``SET TRANSACTION SNAPSHOT``). All transactions stay open until
the context ends; they only read, and are rolled back.

Threads borrow a connection with :meth:`SnapshotReaders.borrow` (a queue: a connection is never used by
two threads at once).
"""

from __future__ import annotations

import queue
import re
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from rag_pipeline.settings import get_settings

_SNAPSHOT_ID = re.compile(r"[0-9A-F]+-[0-9A-F]+(-[0-9]+)?")


def reader_count(requested: int | None = None) -> int:
    """``requested``, else ``RAG_EVAL_READERS`` (default 2; :mod:`rag_pipeline.settings`), at least 1."""
    if requested is None:
        requested = get_settings().eval_readers
    if requested < 1:
        raise ValueError(f"the number of read connections must be at least 1, got {requested}")
    return requested


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
            snapshot_id = first.execute(sa.text("SELECT pg_export_snapshot()")).scalar_one()
            if not _SNAPSHOT_ID.fullmatch(snapshot_id):  # it is spliced into SQL below
                raise RuntimeError(f"unexpected snapshot id {snapshot_id!r}")
        for _ in range(n - 1):
            conn = engine.connect().execution_options(isolation_level="REPEATABLE READ")
            connections.append(conn)
            conn.begin()
            conn.exec_driver_sql(f"SET TRANSACTION SNAPSHOT '{snapshot_id}'")
        yield SnapshotReaders(connections, snapshot_id)
    finally:
        for conn in reversed(connections):
            conn.close()  # rolls the read-only transaction back
