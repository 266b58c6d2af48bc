"""The in-memory leg indexes kept on disk: read back, an index is the one built from the database, array for array;
a run on it stores the same pools; another content version is another file; a torn file is built again; 0 turns
it off; the folder stays within its budget."""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from rag_pipeline.evaluation import index_files, shared_indexes
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import load_leg_indexes
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.knowledge_base.versions import content_version
from rag_pipeline.retrieval.bm25_index import Bm25Index
from rag_pipeline.retrieval.dense_index import DenseIndex
from rag_pipeline.retrieval.strategies import load_registry
from rag_pipeline.settings import index_cache_dir
from rag_pipeline_tests.eval_helpers import stored_pools

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = load_registry()
STRATEGIES = ("hybrid-bm25-exact-v1", "hybrid-v1")  # BM25 (k1 0.9, b 0.4) and exact USE vectors; ts_rank_cd


@pytest.fixture
def cache(monkeypatch, tmp_path) -> Path:
    monkeypatch.setenv("RAG_PROJECT_ROOT", str(tmp_path))
    monkeypatch.setenv("RAG_INDEX_CACHE_MB", "64")
    shared_indexes.clear()
    yield index_cache_dir()
    shared_indexes.clear()


def _kb(engine, name: str):
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, name)
        return kb, content_version(conn, kb.id).version


def _same(a, b) -> None:
    assert type(a) is type(b)
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if hasattr(x, "toarray"):
            assert x.shape == y.shape and x.dtype == y.dtype, name
            assert (x.indptr == y.indptr).all() and (x.indices == y.indices).all() and (x.data == y.data).all(), name
        elif isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape and (x == y).all(), name
            assert {type(v) for v in y.tolist()} <= {type(v) for v in x.tolist()} | {float}, name
        else:
            assert x == y, name


def test_an_index_read_from_its_file_is_the_one_built_from_the_database(engine, demo_kb, cache):
    kb, version = _kb(engine, demo_kb)
    load_leg_indexes(engine, kb, [REGISTRY[v] for v in STRATEGIES])
    built = dict(shared_indexes._kept)
    assert len(built) == 2 and len(list(cache.glob("*.npz"))) == 2, "each index written once"
    for key, (index, _) in built.items():
        assert isinstance(index, Bm25Index | DenseIndex)
        assert key[2] == version
        _same(index, index_files.read(key))

    shared_indexes.clear()
    before = dict(shared_indexes.loads)
    load_leg_indexes(engine, kb, [REGISTRY[v] for v in STRATEGIES])
    assert shared_indexes.loads["from_file"] - before["from_file"] == 2
    assert shared_indexes.loads["loaded"] == before["loaded"], "nothing read from the database"


def _mapped_memory(array: np.ndarray) -> bool:
    base = array.base
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    return isinstance(base, mmap.mmap)


def test_large_arrays_are_mapped_from_the_file_and_read_the_same(engine, demo_kb, cache, monkeypatch):
    """Every array of at least MAPPED_BYTES is mapped from the file (here: every non-empty one), read-only, and the
    index is the same; a file cut anywhere inside a mapped array is not used."""
    monkeypatch.setattr(index_files, "MAPPED_BYTES", 1)
    kb, _ = _kb(engine, demo_kb)
    load_leg_indexes(engine, kb, [REGISTRY[v] for v in STRATEGIES])
    for key, (index, _) in dict(shared_indexes._kept).items():
        path = index_files.path_of(key)
        arrays = index_files._mapped(path)
        big = [name for name, a in arrays.items() if a.size > 1]
        assert {"chunk_ids", "document_ids"} <= set(big)
        for name in big:
            assert _mapped_memory(arrays[name]) and not arrays[name].flags.writeable, name
        _same(index, index_files.read(key))
        data = path.read_bytes()
        for cut in (len(data) // 2, len(data) - 30):
            path.write_bytes(data[:cut])
            assert index_files.read(key) is None, cut
        path.write_bytes(data)
        assert index_files.read(key) is not None


def test_a_run_on_indexes_from_files_stores_the_same_pools(engine, demo_kb, cache, monkeypatch):
    from rag_pipeline.evaluation.evaluate import evaluate_dataset

    dataset = load_dataset(ROOT / "datasets" / "demo.json")
    monkeypatch.setattr(index_files, "MAPPED_BYTES", 1)  # the run searches arrays mapped from the files
    monkeypatch.setenv("RAG_INDEX_CACHE_MB", "0")
    shared_indexes.clear()
    fresh = {v: evaluate_dataset(engine, dataset, REGISTRY[v]) for v in STRATEGIES}
    assert not list(cache.glob("*.npz")), "0: nothing kept on disk"
    monkeypatch.setenv("RAG_INDEX_CACHE_MB", "64")
    shared_indexes.clear()
    kb, _ = _kb(engine, demo_kb)
    load_leg_indexes(engine, kb, [REGISTRY[v] for v in STRATEGIES])  # written
    shared_indexes.clear()
    before = dict(shared_indexes.loads)
    from_files = {v: evaluate_dataset(engine, dataset, REGISTRY[v]) for v in STRATEGIES}
    assert shared_indexes.loads["from_file"] - before["from_file"] == 2
    for version in STRATEGIES:
        pools = stored_pools(engine, from_files[version].run_id)
        assert len(pools) > 0 and pools == stored_pools(engine, fresh[version].run_id), version
        assert from_files[version].averages == fresh[version].averages


def test_a_torn_or_foreign_file_is_not_used_and_another_version_is_another_file(engine, demo_kb, cache):
    kb, version = _kb(engine, demo_kb)
    load_leg_indexes(engine, kb, [REGISTRY["bm25-v1"]])
    [(key, _)] = shared_indexes._kept.items()
    path = index_files.path_of(key)
    other = (key[0], key[1], "f" * 64, *key[3:])  # the same knowledge base at another content version
    assert index_files.path_of(other) != path and index_files.read(other) is None
    path.write_bytes(path.read_bytes()[:1000])  # torn
    assert index_files.read(key) is None
    with engine.connect() as conn:
        count = conn.execute(sa.text("SELECT count(*) FROM document_chunks WHERE knowledge_base_id = :kb"),
                             {"kb": kb.id}).scalar_one()
    shared_indexes.clear()
    load_leg_indexes(engine, kb, [REGISTRY["bm25-v1"]])  # built again from the database, written whole
    index = index_files.read(key)
    assert isinstance(index, Bm25Index) and 0 < len(index.chunk_ids) <= count


def test_the_folder_keeps_the_most_recently_used_files_within_its_budget(engine, demo_kb, cache, monkeypatch):
    kb, _ = _kb(engine, demo_kb)
    load_leg_indexes(engine, kb, [REGISTRY["bm25-v1"]])
    [(key, (index, _))] = shared_indexes._kept.items()
    size = index_files.path_of(key).stat().st_size
    monkeypatch.setenv("RAG_INDEX_CACHE_MB", "1")
    room = index_files.budget_bytes() // size
    assert 1 <= room < 40, size
    keys = [(key[0], key[1], f"{i:064x}", *key[3:]) for i in range(room + 2)]
    past = time.time() - 1000
    for i, k in enumerate(keys):
        index_files.write(k, index)
        os.utime(index_files.path_of(k), (past + i, past + i))  # a clear order of use
    kept = {p.name for p in cache.glob("*.npz")}
    assert sum(p.stat().st_size for p in cache.glob("*.npz")) <= index_files.budget_bytes()
    assert len(kept) == room and index_files.path_of(keys[-1]).name in kept, "the newest stay"
    assert index_files.path_of(keys[0]).name not in kept, "the oldest went first"


def test_without_a_project_folder_no_file_is_kept(engine, demo_kb, monkeypatch):
    from rag_pipeline.settings import get_settings

    monkeypatch.delenv("RAG_PROJECT_ROOT", raising=False)
    monkeypatch.setenv("RAG_INDEX_CACHE_MB", "64")
    monkeypatch.setattr(type(get_settings()), "named_project_root", lambda self: None)  # an installed wheel
    assert index_cache_dir() is None and index_files.budget_bytes() == 0
    shared_indexes.clear()
    kb, _ = _kb(engine, demo_kb)
    load_leg_indexes(engine, kb, [REGISTRY["bm25-v1"]])  # built from the database, kept in memory only
    [(key, _)] = shared_indexes._kept.items()
    assert index_files.read(key) is None
    shared_indexes.clear()


def _dense_index(rows: int, dimension: int = 512) -> DenseIndex:
    """An index of ``rows`` random unit vectors (the writer's arrays, not a search: any values will do)."""
    vectors = np.random.default_rng(7).standard_normal((rows, dimension), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = np.array([f"{i:08x}-0000-4000-8000-000000000000" for i in range(rows)], dtype=object)
    return DenseIndex("kb", "use-multilingual-v3", vectors, (vectors.astype(np.float64) ** 2).sum(axis=1), ids,
                      ids.copy(), np.array(["doc.txt"] * rows, dtype=object))


def test_a_file_is_streamed_to_disk_not_built_in_memory_first(cache, monkeypatch):
    import tracemalloc

    monkeypatch.setenv("RAG_INDEX_CACHE_MB", "512")
    index = _dense_index(60_000)  # 117 MiB of vectors; the writer's own buffers are about 16 MiB and the ids' text
    key = ("vectors", "kb", "0" * 64, "use-multilingual-v3")
    tracemalloc.start()
    try:
        index_files.write(key, index)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = index_files.path_of(key).stat().st_size
    assert size > index.vectors.nbytes
    assert peak < index.vectors.nbytes / 2, f"writing took {peak / 2**20:.1f} MiB for a {size / 2**20:.1f} MiB file"
    _same(index, index_files.read(key))
    arrays = {"format": np.array(index_files.FORMAT), "key": np.array(repr(key)), **index_files._arrays(index)}
    assert size <= index_files.file_bytes(arrays) <= size + 64 * 1024, "the size is known before writing"


def test_an_index_larger_than_the_budget_is_not_written_and_the_log_says_so(cache, monkeypatch, caplog):
    monkeypatch.setenv("RAG_INDEX_CACHE_MB", "1")
    index = _dense_index(1_000)  # 2 MiB of vectors
    key = ("vectors", "kb", "1" * 64, "use-multilingual-v3")
    with caplog.at_level("INFO", logger=index_files.__name__):
        index_files.write(key, index)
    assert not index_files.path_of(key).exists() and not list(cache.glob("*"))
    [message] = [r.getMessage() for r in caplog.records]
    assert "not kept on disk: larger than RAG_INDEX_CACHE_MB (1 MiB)" in message, message
