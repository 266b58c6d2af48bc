"""Ingestion: documents → chunks → embeddings → rows (documents, chunks, embeddings, tsvector, BM25 stats).

Idempotent and synced with the folder: an unchanged document is skipped, a changed one keeps its unchanged chunks
(deterministic ids) and retires the others (``is_current = false``, kept for ``fix-labels``),
``rechunk`` cuts every document again; a document missing from the folder is marked deleted. One transaction with
COPY, so a concurrent evaluation sees the old or the new knowledge base. New chunks are encoded on a background
thread (:mod:`background_encoder`) while the main thread writes the text side; a KB's first vectors of a model get
their HNSW index built once after the commit. An error anywhere cancels the encoder and rolls back.

``result.timings`` (seconds; stages overlap): ``chunk_s`` (planning), ``encode_<model>_s`` (encoder thread),
``copy_<model>_s`` (vector COPYs), ``embed_and_copy_s`` (wall time after the text-side SQL until every vector is
written), ``index_build_<model>_s`` (first HNSW build), ``total_s`` (ANALYZE included). ``result.warnings``: a text
mode that does not fit the documents' script (:func:`textsearch.text_mode_warning`), documents without text."""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from rag_pipeline.contracts.knowledge_base import IngestResult
from rag_pipeline.knowledge_base import chunking, term_stats, textsearch
from rag_pipeline.knowledge_base.background_encoder import BackgroundEncoder, encoder_threads
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL, get_embedder
from rag_pipeline.knowledge_base.lifecycle import ensure_knowledge_base
from rag_pipeline.knowledge_base.queries import chunks, documents, vectors
from rag_pipeline.knowledge_base.sources import SourceDocument
from rag_pipeline.storage import queries as storage
from rag_pipeline.storage.engine import (
    build_vector_index,
    driver_connection,
    ensure_embedding_model,
    hnsw_index_name,
    knowledge_base_lock,
    vector_index_state,
)

Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass
class _NewChunk:
    id: uuid.UUID
    document_id: uuid.UUID
    chunk: chunking.Chunk


def ingest_documents(engine: sa.Engine, docs: Sequence[SourceDocument], knowledge_base: str, *,
                     text_search: str = "simple", chunk_size: int | None = 500, chunk_overlap: int = 80,
                     models: Sequence[str] = (DEFAULT_MODEL,), prune: bool = True, rechunk: bool = False,
                     progress: Progress | None = None) -> IngestResult:
    """Bring the knowledge base in line with ``docs``; ``chunk_size=None`` keeps each document one chunk;
    ``rechunk`` re-chunks a KB of another chunk size/overlap in place (else refused). Two ingestions of one KB take
    turns (:func:`~rag_pipeline.storage.engine.knowledge_base_lock`)."""
    with knowledge_base_lock(engine, knowledge_base):
        return _ingest(engine, docs, knowledge_base, text_search=text_search, chunk_size=chunk_size,
                       chunk_overlap=chunk_overlap, models=models, prune=prune, rechunk=rechunk, progress=progress)


def _ingest(engine: sa.Engine, docs: Sequence[SourceDocument], knowledge_base: str, *, text_search: str,
            chunk_size: int | None, chunk_overlap: int, models: Sequence[str], prune: bool, rechunk: bool,
            progress: Progress | None) -> IngestResult:
    t0 = time.perf_counter()
    embedders = [get_embedder(m) for m in models]
    # Models first, in their own short transaction. A KB × model without an HNSW index gets it in one bulk build
    # after its vectors are written (2-3x cheaper than inserting into the graph: bench/index_build_bench.py), in a
    # short transaction of its own (its SHARE lock held through a long ingestion would deadlock a concurrent one).
    with engine.begin() as conn:
        known = documents.knowledge_base_settings(conn, knowledge_base)
        kb_index_id = known.id if known else chunking.knowledge_base_id(knowledge_base)
        unindexed = []
        for embedder in embedders:
            ensure_embedding_model(conn, embedder.name, embedder.dimension, embedder.backend)
            if vector_index_state(conn, embedder.name, kb_index_id) != "valid":
                unindexed.append(embedder)
    with engine.begin() as conn:
        kb_id, recut = ensure_knowledge_base(conn, knowledge_base, text_search, chunk_size or 0, chunk_overlap,
                                             rechunk=rechunk)
        result = IngestResult(knowledge_base=knowledge_base, knowledge_base_id=str(kb_id), documents_seen=len(docs),
                              warnings=_warnings(knowledge_base, text_search, docs))
        existing = {row.original_name: (row.id, row.content_hash, row.is_deleted)
                    for row in documents.documents_of(conn, kb_id)}
        new_chunks, changed_doc_ids, doc_rows = _plan(docs, existing, knowledge_base, chunk_size, chunk_overlap, result,
                                                      recut)
        present = {d.original_name for d in docs}
        removed = [v[0] for k, v in existing.items() if prune and not v[2] and k not in present]
        result.documents_removed = len(removed)
        result.timings["chunk_s"] = time.perf_counter() - t0

        with BackgroundEncoder(threads=encoder_threads(engine)) as encoder:
            pre = {e.name: _pre_encode(conn, encoder, e, new_chunks) for e in embedders}
            # BM25 statistics = those of the searchable chunks, updated by the difference the written documents make
            affected = [row[0] for row in doc_rows] + list(changed_doc_ids) + removed
            with term_stats.tracking(conn, kb_id, affected):
                _write_documents(conn, kb_id, doc_rows)
                if removed:
                    documents.mark_deleted(conn, removed)
                if changed_doc_ids:  # their current chunks the new chunking does not produce again
                    result.chunks_replaced = chunks.retire_chunks(conn, changed_doc_ids, {c.id for c in new_chunks})
                inserted = _insert_chunks(conn, kb_id, text_search, new_chunks)
                result.chunks_inserted = len(inserted)
            t1 = time.perf_counter()
            for embedder in embedders:
                result.embeddings_written += _embed_missing(
                    conn, kb_id, embedder, encoder, pre[embedder.name], progress, result.timings)
            result.timings["embed_and_copy_s"] = time.perf_counter() - t1
        result.timings.update({f"encode_{name}_s": sec for name, sec in encoder.encode_s.items()})
    for embedder in unindexed:  # the KB's own HNSW index of each model, over the vectors just written
        t = time.perf_counter()
        with engine.begin() as conn:
            build_vector_index(conn, embedder.name, embedder.dimension, kb_index_id)
        result.timings[f"index_build_{embedder.name}_s"] = time.perf_counter() - t
    if result.chunks_inserted or result.chunks_replaced or result.embeddings_written:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            vectors.analyze(conn)
            result.timings["reindex_s"] = _rebuild_if_churned(conn, kb_id, embedders, result)
    result.timings["total_s"] = time.perf_counter() - t0
    return result


def _warnings(knowledge_base: str, text_search: str, docs: Sequence[SourceDocument]) -> list[str]:
    warnings = []
    if mismatch := textsearch.text_mode_warning(knowledge_base, text_search, [d.text for d in docs]):
        warnings.append(mismatch)
    empty = [d.original_name for d in docs if not d.text.strip()]  # chunking yields nothing for these
    if empty:
        shown = ", ".join(empty[:10]) + (f" and {len(empty) - 10} more" if len(empty) > 10 else "")
        warnings.append(f"{len(empty)} document(s) have no text and got no chunk, so no label can point at them: "
                        f"{shown}")
    return warnings


def _plan(docs: Sequence[SourceDocument], existing: dict, kb_name: str, chunk_size: int | None, chunk_overlap: int,
          result: IngestResult, recut: bool = False) -> tuple[list[_NewChunk], list[uuid.UUID], list[tuple]]:
    new_chunks: list[_NewChunk] = []
    changed: list[uuid.UUID] = []
    doc_rows = []
    for doc in docs:
        doc_id = chunking.document_id(kb_name, doc.original_name)
        digest = chunking.sha256(doc.text)
        previous = existing.get(doc.original_name)
        if previous and previous[1] == digest and not previous[2]:
            if not recut:
                result.documents_unchanged += 1
                continue
            result.documents_rechunked += 1
            changed.append(previous[0])
        elif previous:
            result.documents_changed += 1
            changed.append(previous[0])
        else:
            result.documents_new += 1
        doc_rows.append((doc_id, doc, digest))
        if chunk_size:
            pieces = chunking.chunk_text(doc.text, chunk_size, chunk_overlap)
        else:
            pieces = chunking.whole_document(doc.text)
        new_chunks.extend(_NewChunk(chunking.chunk_id(kb_name, doc.original_name, c), doc_id, c) for c in pieces)
    return new_chunks, changed, doc_rows


def _write_documents(conn: sa.Connection, kb_id, doc_rows) -> None:
    if doc_rows:
        documents.upsert_documents(conn, [{"id": i, "kb": kb_id, "name": d.original_name, "title": d.title,
                                           "content": d.text.replace("\x00", " "), "hash": h} for i, d, h in doc_rows])


REINDEX_CHURN = 0.1
"""A re-ingestion that replaced at least this share of a KB's current chunks rebuilds its HNSW indexes."""

REINDEX_LOCK_TIMEOUT_S = 5


def _rebuild_if_churned(conn: sa.Connection, kb_id, embedders, result: IngestResult) -> float:
    """After a re-ingestion that replaced many vectors (:data:`REINDEX_CHURN`), ``REINDEX INDEX CONCURRENTLY`` the KB's
    own HNSW index of each model (autocommit ``conn``), so the graph holds no deleted vectors. A rebuild that would wait
    on an older snapshot beyond :data:`REINDEX_LOCK_TIMEOUT_S` is given up with a warning. Returns seconds."""
    if not result.chunks_replaced:
        return 0.0
    if result.chunks_replaced < REINDEX_CHURN * max(chunks.current_chunk_count(conn, kb_id), 1):
        return 0.0
    t = time.perf_counter()
    readers = storage.other_snapshot_holders(conn)
    if readers:  # a rebuild would wait for every transaction that holds an older snapshot
        result.warnings.append(_skipped(result, f"{readers} other transaction(s) were reading"))
        return time.perf_counter() - t
    with storage.lock_timeout(conn, REINDEX_LOCK_TIMEOUT_S):
        for embedder in embedders:
            index = hnsw_index_name(embedder.name, kb_id)
            if storage.index_validity(conn, index) is None:
                continue
            try:
                storage.reindex(conn, index, concurrently=True)
            except sa.exc.OperationalError as exc:
                if getattr(getattr(exc, "orig", None), "sqlstate", None) != "55P03":  # lock_not_available
                    raise
                result.warnings.append(_skipped(result, "an evaluation started reading meanwhile") +
                                       f" (drop the invalid index {index}_ccnew if it remains)")
                break
    return time.perf_counter() - t


def _skipped(result: IngestResult, why: str) -> str:
    return (f"knowledge base {result.knowledge_base!r}: {result.chunks_replaced} vectors were replaced but its HNSW "
            f"index was not rebuilt ({why}); autovacuum removes the replaced vectors later")


def _insert_chunks(conn: sa.Connection, kb_id, mode, new_chunks: list[_NewChunk]) -> Sequence:
    if not new_chunks:
        return []
    return chunks.insert_chunks(conn, kb_id, textsearch.regconfig(mode), (
        (c.id, c.document_id, c.chunk.ordinal, c.chunk.content.replace("\x00", " "), c.chunk.content_hash,
         c.chunk.char_start, c.chunk.char_end, textsearch.prepare(mode, c.chunk.content)) for c in new_chunks))


def _pre_encode(conn: sa.Connection, encoder: BackgroundEncoder, embedder, new_chunks: list[_NewChunk]) -> list:
    """Start encoding the new chunks that have no vector of this model yet (a revived old chunk keeps its own)."""
    ids = [c.id for c in new_chunks]
    have = vectors.chunks_with_vector(conn, ids, embedder.name) if ids else set()
    # in id order, the order _embed_missing lists them in (a seeded fake encoder assigns the same vectors)
    todo = sorted((c for c in new_chunks if c.id not in have), key=lambda c: c.id)
    return encoder.submit(embedder, [c.id for c in todo], [c.chunk.content.replace("\x00", " ") for c in todo])


def _embed_missing(conn: sa.Connection, kb_id, embedder, encoder: BackgroundEncoder, pre: list,
                   progress: Progress | None, timings: dict) -> int:
    """Embed every current chunk of the KB that has no vector of this model yet; COPY them in binary, batch by
    batch as the encoder delivers them. ``pre``: batches already submitted (reused by id when the text matches)."""
    rows = vectors.chunks_without_vector(conn, kb_id, embedder.name)
    wanted = {r.id: r.content for r in rows}
    batches: deque = deque()
    for ids, texts, future in pre:
        keep = []
        for i, (cid, text) in enumerate(zip(ids, texts, strict=True)):
            if wanted.get(cid) == text:
                keep.append(i)
                del wanted[cid]
        if keep:
            batches.append((ids, future, keep))
        else:
            future.cancel()  # not needed after all (the server already had its vectors)
    if wanted:  # older chunks without a vector (earlier ingestion, model added later)
        for ids, _texts, future in encoder.submit(embedder, list(wanted), list(wanted.values())):
            batches.append((ids, future, list(range(len(ids)))))
    if not rows:
        return 0
    from pgvector.psycopg import register_vector  # noqa: PLC0415

    raw = driver_connection(conn)
    register_vector(raw)
    done, copy_s = 0, 0.0
    while batches:
        ids, future, keep = batches.popleft()
        encoded = future.result()  # re-raises the encoder's exception as is
        t = time.perf_counter()
        vectors.copy_vectors(raw, kb_id, embedder.name, [ids[i] for i in keep], encoded[keep])
        copy_s += time.perf_counter() - t
        done += len(keep)
        if progress:
            progress(f"embedding ({embedder.name})", done, len(rows))
    timings[f"copy_{embedder.name}_s"] = copy_s
    return len(rows)

