"""Question vectors embedded once per model: ``question_embeddings`` keyed by (sha256 of the question text, model).

:class:`QuestionVectors` reuses stored vectors and embeds only the others, storing them at once in a short
transaction of their own (``ON CONFLICT DO NOTHING``); float32, so a reused vector is bit for bit the first one."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import sqlalchemy as sa

from rag_pipeline.knowledge_base.embedding import Embedder
from rag_pipeline.knowledge_base.queries import vectors as queries


def question_hash(text: str) -> bytes:
    """sha256 of the question text (UTF-8), the key of its vectors."""
    return hashlib.sha256(text.encode("utf-8")).digest()


def from_vector_send(data) -> np.ndarray:
    """A vector in pgvector's binary form (``vector_send``) → float32 array (the values bit for bit)."""
    return np.frombuffer(bytes(data), dtype=">f4", offset=4).astype(np.float32)


def unembedded(engine: sa.Engine, model: str, questions: Sequence[str]) -> int:
    """How many distinct ``questions`` have no stored vector of ``model`` yet (nothing is embedded)."""
    hashes = list({question_hash(q) for q in questions})
    with engine.connect() as conn:
        return len(hashes) - queries.stored_question_count(conn, model, hashes)


class QuestionVectors:
    """Vectors of questions by one embedder, reusing and filling ``question_embeddings`` (see the module doc)."""

    def __init__(self, engine: sa.Engine, embedder: Embedder):
        self.engine, self.embedder = engine, embedder
        self.reused = self.embedded = 0

    def vectors(self, questions: Sequence[str]) -> np.ndarray:
        """``(len(questions), dimension)`` float32, unit length, in the order given."""
        hashes = [question_hash(q) for q in questions]
        with self.engine.connect() as conn:
            stored = {bytes(h): from_vector_send(data)
                      for h, data in queries.question_vectors(conn, self.embedder.name, list(set(hashes)))}
        missing = list(dict.fromkeys(h for h in hashes if h not in stored))
        if missing:
            text_of = dict(zip(hashes, questions, strict=True))
            fresh = self.embedder.embed([text_of[h] for h in missing])
            with self.engine.begin() as conn:
                queries.store_question_vectors(conn, self.embedder.name, missing, list(fresh))
            stored.update(zip(missing, fresh, strict=True))
        self.embedded += len(missing)
        self.reused += len(hashes) - len(missing)  # a question repeated within the batch counts as reused
        return np.array([stored[h] for h in hashes], dtype=np.float32).reshape(len(hashes), self.embedder.dimension)

    def summary(self) -> dict[str, int]:
        return {"reused": self.reused, "embedded": self.embedded}
