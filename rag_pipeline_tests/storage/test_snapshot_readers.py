"""Parallel read connections of an evaluation see one snapshot, whatever commits meanwhile."""

from __future__ import annotations

import threading
import uuid

import pytest
import sqlalchemy as sa

from rag_pipeline.knowledge_base.lifecycle import ensure_knowledge_base
from rag_pipeline.storage.snapshot_readers import reader_count, snapshot_readers


def _count(conn, name: str) -> int:
    return conn.execute(sa.text("SELECT count(*) FROM knowledge_bases WHERE name = :n"), {"n": name}).scalar()


def test_all_readers_share_the_snapshot_taken_before_a_concurrent_commit(engine):
    name = f"snap-{uuid.uuid4().hex[:8]}"
    with snapshot_readers(engine, 3) as readers:
        assert len(readers) == 3 and readers.snapshot_id
        pids = set()
        for conn in readers.connections:
            assert _count(conn, name) == 0  # every transaction has its snapshot now
            pids.add(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar())
        assert len(pids) == 3, "three separate backends"
        with engine.begin() as writer:
            ensure_knowledge_base(writer, name, "simple", 0, 0)
        with engine.connect() as fresh:
            assert _count(fresh, name) == 1
        seen = []

        def read() -> None:
            with readers.borrow() as conn:
                seen.append(_count(conn, name))

        threads = [threading.Thread(target=read) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert seen == [0] * 6
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM knowledge_bases WHERE name = :n"), {"n": name})


def test_one_reader_exports_nothing(engine):
    with snapshot_readers(engine, 1) as readers:
        assert len(readers) == 1 and readers.snapshot_id is None


def test_reader_count(monkeypatch):
    monkeypatch.delenv("RAG_EVAL_READERS", raising=False)
    assert reader_count() == 2 and reader_count(5) == 5
    monkeypatch.setenv("RAG_EVAL_READERS", "3")
    assert reader_count() == 3
    for bad in ("0", "two"):
        monkeypatch.setenv("RAG_EVAL_READERS", bad)
        with pytest.raises(ValueError, match="RAG_EVAL_READERS|at least 1"):
            reader_count()
