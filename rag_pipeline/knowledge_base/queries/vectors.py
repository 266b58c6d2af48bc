"""SQL of vectors: the chunks still to embed, the binary COPY of their vectors, stored question vectors."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import sqlalchemy as sa

_WITHOUT_VECTOR_SQL = (
    "SELECT c.id, c.content FROM document_chunks c WHERE c.knowledge_base_id = :kb AND c.is_current "
    "AND NOT EXISTS (SELECT 1 FROM chunk_embeddings e WHERE e.chunk_id = c.id AND e.model = :m) ORDER BY c.id")
_COPY_VECTORS_SQL = ("COPY chunk_embeddings (chunk_id, model, knowledge_base_id, embedding) FROM STDIN "
                     "WITH (FORMAT BINARY)")
_MODELS_SQL = ("SELECT DISTINCT e.model FROM chunk_embeddings e JOIN document_chunks c ON c.id = e.chunk_id "
               "WHERE e.knowledge_base_id = :kb AND c.is_current ORDER BY e.model")
_QUESTION_VECTORS_SQL = ("SELECT question_hash, vector_send(embedding) AS data FROM question_embeddings "
                         "WHERE model = :model AND question_hash = ANY(:hashes)")
_STORE_QUESTION_VECTORS_SQL = (
    "INSERT INTO question_embeddings (question_hash, model, embedding) "
    "SELECT h, :model, v FROM unnest(CAST(:hashes AS bytea[]), CAST(:vectors AS vector[])) AS t(h, v) "
    "ON CONFLICT DO NOTHING")


def chunks_with_vector(conn: sa.Connection, chunk_ids: list, model: str) -> set:
    return set(conn.execute(sa.text("SELECT chunk_id FROM chunk_embeddings WHERE chunk_id = ANY(:ids) AND model = :m"),
                            {"ids": chunk_ids, "m": model}).scalars())


def chunks_without_vector(conn: sa.Connection, kb_id, model: str) -> Sequence[sa.Row]:
    """``(id, content)`` of the KB's current chunks without a vector of ``model``, in id order."""
    return conn.execute(sa.text(_WITHOUT_VECTOR_SQL), {"kb": kb_id, "m": model}).all()


def copy_vectors(raw, kb_id, model: str, chunk_ids: Sequence, vectors: np.ndarray) -> None:
    """Binary COPY of (chunk, model, vector) rows on ``raw`` (a driver connection with pgvector registered)."""
    with raw.cursor().copy(_COPY_VECTORS_SQL) as copy:
        copy.set_types(["uuid", "varchar", "uuid", "vector"])
        for cid, vec in zip(chunk_ids, vectors, strict=True):
            copy.write_row((cid, model, kb_id, vec))


def embedding_models(conn: sa.Connection, kb_id) -> list[str]:
    return list(conn.execute(sa.text(_MODELS_SQL), {"kb": kb_id}).scalars())


def analyze(conn: sa.Connection) -> None:
    """Fresh planner statistics, so the first evaluation on a new KB gets good plans."""
    conn.execute(sa.text("ANALYZE document_chunks, chunk_embeddings, chunk_terms, knowledge_base_term_stats"))


def question_vectors(conn: sa.Connection, model: str, hashes: list[bytes]) -> sa.CursorResult:
    """``(question_hash, data)`` of the stored vectors of ``model`` among ``hashes``; ``data`` in pgvector's binary
    form (``vector_send``: int16 dimension, int16 unused, the big-endian float4 values)."""
    return conn.execute(sa.text(_QUESTION_VECTORS_SQL), {"model": model, "hashes": hashes})


def stored_question_count(conn: sa.Connection, model: str, hashes: list[bytes]) -> int:
    """How many of ``hashes`` have a stored vector of ``model``."""
    return conn.execute(sa.text("SELECT count(*) FROM question_embeddings WHERE model = :model "
                                "AND question_hash = ANY(:hashes)"), {"model": model, "hashes": hashes}).scalar_one()


def store_question_vectors(conn: sa.Connection, model: str, hashes: list[bytes], vectors: list) -> None:
    conn.execute(sa.text(_STORE_QUESTION_VECTORS_SQL), {"model": model, "hashes": hashes, "vectors": vectors})
