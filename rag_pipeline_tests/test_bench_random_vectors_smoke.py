"""Smoke-run bench/random_vectors.py on a small text-only knowledge base: one unit vector of the model per current
chunk, no HNSW index, nothing added a second time."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import sqlalchemy as sa

from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.sources import SourceDocument
from rag_pipeline.storage.engine import vector_index_state

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import random_vectors  # noqa: E402


def test_random_vectors_smoke(engine, kb_name) -> None:
    docs = [SourceDocument(original_name=f"d{i}.md", title=None, text=f"Document {i}. " + "Some words here. " * 60)
            for i in range(3)]
    result = ingest_documents(engine, docs, kb_name, text_search="english", chunk_size=200, models=())
    assert result.chunks_inserted > 3
    messages: list[str] = []
    assert random_vectors.add_random_vectors(engine, kb_name, DEFAULT_MODEL, log=messages.append) == \
        result.chunks_inserted
    assert messages and messages[-1].startswith(f"{result.chunks_inserted:,} / {result.chunks_inserted:,}")
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT c.id, e.embedding FROM document_chunks c LEFT JOIN chunk_embeddings e "
            "ON e.chunk_id = c.id AND e.model = :m WHERE c.knowledge_base_id = :kb AND c.is_current"),
            {"m": DEFAULT_MODEL, "kb": result.knowledge_base_id}).all()
        assert len(rows) == result.chunks_inserted and all(r.embedding is not None for r in rows)
        norms = np.linalg.norm(np.array([r.embedding.to_numpy().astype(np.float64) for r in rows]), axis=1)
        assert np.allclose(norms, 1.0, atol=1e-6)
        assert vector_index_state(conn, DEFAULT_MODEL, result.knowledge_base_id) is None, "no HNSW index"
    assert random_vectors.add_random_vectors(engine, kb_name, DEFAULT_MODEL, log=messages.append) == 0
