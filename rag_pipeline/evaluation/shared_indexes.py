"""In-memory leg indexes shared by the evaluation runs of one process: a click's strategies (one Dagster run, its
steps in one process) load a knowledge base's BM25 postings and vectors once.

An index is keyed by what it was built from: the knowledge base, its content version as the run's snapshot sees it
(searchable chunk ids, content-derived, with their models: the same version is the same chunks and vectors) and
the index's own parameters (model; k1, b). A run whose snapshot shows another version loads its own. The next
process reads an index from its file (:mod:`index_files`) instead of the database. At most
:data:`BUDGET_BYTES` of indexes stay, the least recently used go first; a bigger index is used once, not kept.
The hits of the SQL vector leg are shared the same way, by content version (:func:`leg_cache`)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TypeVar

from rag_pipeline.evaluation import index_files
from rag_pipeline.retrieval.bm25_index import Bm25Index
from rag_pipeline.retrieval.dense_index import DenseIndex
from rag_pipeline.retrieval.leg_cache import LegCache

BUDGET_BYTES = 1 << 30
T = TypeVar("T", Bm25Index, DenseIndex)

_lock = threading.Lock()
_kept: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
loads = {"loaded": 0, "from_file": 0, "reused": 0}  # process totals, for the benchmarks and tests


def size(index: Bm25Index | DenseIndex) -> int:
    """Bytes of the index's arrays (the id columns counted at 100 bytes a row)."""
    if isinstance(index, DenseIndex):
        return index.vectors.nbytes + index.norms.nbytes + 100 * len(index.chunk_ids)
    m = index.matrix
    return m.data.nbytes + m.indices.nbytes + m.indptr.nbytes + 100 * (len(index.chunk_ids) + len(index.term_row))


def held(key: Hashable) -> bool:
    with _lock:
        return key in _kept


def shared(key: Hashable, load: Callable[[], T]) -> T:
    """The index of ``key``: held by this process, else read from its file (:mod:`index_files`), else loaded by
    ``load()`` (and written to its file)."""
    with _lock:
        if key in _kept:
            _kept.move_to_end(key)
            loads["reused"] += 1
            return _kept[key][0]  # type: ignore[return-value]
    # the key names the index's kind, as the loader's
    index: T | None = index_files.read(key)  # type: ignore[assignment]
    source = "from_file"
    if index is None:
        index, source = load(), "loaded"
        if not isinstance(index, Bm25Index | DenseIndex):  # a loader that gave nothing (a test's stand-in): not kept
            return index
        index_files.write(key, index)
    nbytes = size(index)
    with _lock:
        loads[source] += 1
        if nbytes <= BUDGET_BYTES:
            _kept[key] = (index, nbytes)
            while sum(n for _, n in _kept.values()) > BUDGET_BYTES:
                _kept.popitem(last=False)
    return index


LEG_CACHES = 4
"""Knowledge-base content versions whose remembered legs a process keeps (the most recently used)."""
_legs: OrderedDict[Hashable, LegCache] = OrderedDict()


def leg_cache(knowledge_base_id, version: str) -> LegCache:
    """The remembered SQL vector legs of this knowledge base content version
    (:mod:`~rag_pipeline.retrieval.leg_cache`)."""
    scope = (str(knowledge_base_id), version)
    with _lock:
        cache = _legs.get(scope)
        if cache is None:
            cache = _legs[scope] = LegCache(scope)
            while len(_legs) > LEG_CACHES:
                _legs.popitem(last=False)
        _legs.move_to_end(scope)
        return cache


def clear() -> None:
    with _lock:
        _kept.clear()
        _legs.clear()
