"""The in-memory leg indexes on disk: a knowledge base's BM25 postings and exact-leg vectors, written by the first
process that builds them and read by the next one in a fraction of the time the SQL takes (a CLI run and a Dagster
run are each a fresh process).

A file holds one index of :mod:`~rag_pipeline.evaluation.shared_indexes`, under the same key: the knowledge base,
its content version as the run's snapshot sees it (the searchable chunk ids, which are content-derived, with their
models, and the text search mode: the same version is the same chunks, term statistics and vectors, which ingestion
changes in the same transaction) and the index's own parameters (model; k1, b). The file is named by a digest of
that key and of :data:`FORMAT`; the key is stored inside and compared when read, and a file that cannot be read as
such an index is ignored (and replaced). Arrays only, no Python objects. Written whole or not at all
(:func:`~rag_pipeline.storage.files.atomic_output`). A large array is mapped from the file, not read
(:func:`_mapped`): a search reads the postings and vectors it touches. At most ``RAG_INDEX_CACHE_MB`` of files
stay, the least recently used go first; ``RAG_INDEX_CACHE_MB=0`` turns it off. The folder:
``<project>/.rag_pipeline/index-cache``; without a project (no ``RAG_PROJECT_ROOT``, no checkout: a worker in an
empty directory) no files are kept."""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import zipfile
from collections.abc import Hashable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from rag_pipeline.retrieval.bm25_index import Bm25Index
from rag_pipeline.retrieval.dense_index import DenseIndex
from rag_pipeline.settings import get_settings, index_cache_dir
from rag_pipeline.storage.files import FileWriteError, atomic_output

FORMAT = "rag-leg-index-v1"
log = logging.getLogger(__name__)


def budget_bytes() -> int:
    """The folder's budget; 0 without a project folder to keep the files in."""
    return get_settings().index_cache_mb * 2**20 if index_cache_dir() else 0


def path_of(key: Hashable) -> Path:
    folder = index_cache_dir()
    assert folder is not None, "no index files without a project folder (budget_bytes() is 0)"
    return folder / (hashlib.sha256(f"{FORMAT}\n{key!r}".encode()).hexdigest()[:32] + ".npz")


def read(key: Hashable) -> Bm25Index | DenseIndex | None:
    """The index of ``key`` from its file, or None (no file, turned off, or not a readable index of that key)."""
    if budget_bytes() <= 0:
        return None
    path = path_of(key)
    try:
        z = _mapped(path)
        if str(z["format"]) != FORMAT or str(z["key"]) != repr(key):
            return None
        index = _bm25(z) if str(z["kind"]) == "bm25" else _dense(z)
        os.utime(path)  # recently used
        return index
    except FileNotFoundError:
        return None
    except (OSError, KeyError, ValueError, struct.error, zipfile.BadZipFile) as exc:  # torn or foreign: built again
        log.info(f"leg index file {path.name} not used ({type(exc).__name__}); the index is read from the database")
        return None


def write(key: Hashable, index: Bm25Index | DenseIndex) -> None:
    """Keep ``index`` on disk under ``key`` (best effort: a folder that cannot be written only costs the next
    process the SQL), then trim the folder to the budget. The arrays are streamed into the file, not built up in
    memory first (at 1,000,000 vectors that copy alone was 2 GB); an index larger than the whole budget is not
    written, and a warning says so."""
    budget = budget_bytes()
    if budget <= 0:
        return
    arrays: dict[str, Any] = {"format": np.array(FORMAT), "key": np.array(repr(key)), **_arrays(index)}
    size = file_bytes(arrays)
    if size > budget:
        log.warning(f"leg index ({size / 2**20:,.1f} MiB) not kept on disk: larger than RAG_INDEX_CACHE_MB "
                    f"({budget / 2**20:,.0f} MiB), so the next process reads it from the database again (raise "
                    "RAG_INDEX_CACHE_MB above its size to keep it)")
        return
    try:
        with atomic_output(path_of(key), binary=True, parents=True) as handle:
            np.savez(handle, allow_pickle=False, **arrays)
    except FileWriteError as exc:
        log.info(f"leg index not kept on disk: {exc}")
        return
    _trim(path_of(key).parent, budget)


def file_bytes(arrays: dict[str, np.ndarray]) -> int:
    """The size of the ``.npz`` file of ``arrays``, to the array headers and zip entries (under 1 KiB each)."""
    return sum(a.nbytes + 1024 for a in arrays.values())


def _arrays(index: Bm25Index | DenseIndex) -> dict[str, np.ndarray]:
    ids = {"chunk_ids": index.chunk_ids.astype(str), "document_ids": index.document_ids.astype(str),
           "document_names": index.document_names.astype(str), "knowledge_base_id": np.array(index.knowledge_base_id)}
    if isinstance(index, DenseIndex):
        return {"kind": np.array("vectors"), "model": np.array(index.model), "vectors": index.vectors,
                "norms": index.norms, **ids}
    m, c = index.matrix, index.counts
    lexemes = np.empty(len(index.term_row), dtype=object)
    for lexeme, row in index.term_row.items():
        lexemes[row] = lexeme
    return {"kind": np.array("bm25"), "k1": np.array(index.k1), "b": np.array(index.b), "weights": m.data,
            "tf": c.data, "indices": m.indices, "indptr": m.indptr, "shape": np.array(m.shape),
            "lexemes": lexemes.astype(str), **ids}


MAPPED_BYTES = 2**20
"""An array of an index file this large or larger is mapped from the file, not read."""
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # a zip member's local header: signature ... name length, extra length


def _mapped(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an index file by name. ``numpy.savez`` stores each array uncompressed as one ``.npy`` member:
    a large one is mapped from the file where its data lies (read-only; the pages are read as a search touches them,
    so a process need not read postings or vectors it never scores), a small one read. Anything else in the file
    (a compressed member, an object array, which ``numpy.load(allow_pickle=False)`` refuses too) is a
    ``ValueError``."""
    arrays: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as archive, open(path, "rb") as raw:
        for info in archive.infolist():
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                raise ValueError(f"member {info.filename} is not a stored .npy array")
            raw.seek(info.header_offset)
            signature, name_length, extra_length = _LOCAL_HEADER.unpack(raw.read(_LOCAL_HEADER.size))
            if signature != b"PK\x03\x04":
                raise ValueError(f"member {info.filename} has no local header")
            raw.seek(info.header_offset + _LOCAL_HEADER.size + name_length + extra_length)
            version = np.lib.format.read_magic(raw)
            shape, fortran, dtype = (np.lib.format.read_array_header_1_0(raw) if version == (1, 0)
                                     else np.lib.format.read_array_header_2_0(raw))
            if dtype.hasobject:
                raise ValueError(f"member {info.filename} holds Python objects")
            count = int(np.prod(shape))
            order: Literal["C", "F"] = "F" if fortran else "C"
            if count and count * dtype.itemsize >= MAPPED_BYTES:
                array = np.asarray(np.memmap(path, dtype=dtype, mode="r", offset=raw.tell(), shape=shape, order=order))
            else:
                array = np.fromfile(raw, dtype=dtype, count=count).reshape(shape, order=order)
                if array.size != count:
                    raise ValueError(f"member {info.filename} is cut short")
            arrays[info.filename[:-len(".npy")]] = array
    return arrays


def _ids(z) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return z["chunk_ids"].astype(object), z["document_ids"].astype(object), z["document_names"].astype(object)


def _bm25(z) -> Bm25Index:
    shape = tuple(int(n) for n in z["shape"])
    indices, indptr = z["indices"], z["indptr"]
    return Bm25Index(str(z["knowledge_base_id"]), float(z["k1"]), float(z["b"]),
                     sp.csr_array((z["weights"], indices, indptr), shape=shape),
                     {str(lexeme): row for row, lexeme in enumerate(z["lexemes"].tolist())}, *_ids(z),
                     sp.csr_array((z["tf"], indices, indptr), shape=shape))


def _dense(z) -> DenseIndex:
    return DenseIndex(str(z["knowledge_base_id"]), str(z["model"]), z["vectors"], z["norms"], *_ids(z))


def _trim(folder: Path, budget: int) -> None:
    """Remove the least recently used files until the folder's index files fit ``budget`` bytes."""
    try:
        files = sorted((p.stat().st_mtime, p.stat().st_size, p) for p in folder.glob("*.npz"))
    except OSError:
        return
    total = sum(size for _, size, _ in files)
    for _, size, path in files:
        if total <= budget:
            break
        path.unlink(missing_ok=True)
        total -= size
