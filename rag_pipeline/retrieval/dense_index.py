"""Exact vector leg in memory: a knowledge base's vectors of one model loaded once (per evaluation run).

The same candidates as the SQL exact statement (``sql.VECTOR_LEG_EXACT_SQL``, a strategy with ``vector_search:
exact``): every searchable vector scored, the top k by (score desc, chunk id asc), ties at the k-th score
resolved by chunk id. The score is pgvector's expression ``1 - (1 - clamp(cosine similarity))`` evaluated in
float64 from the stored float32 vectors (one matrix product per batch); pgvector sums in float32, so a score
differs from the SQL's by about 1e-7 at most, and two chunks closer than that may swap places (a float tie:
bench/RESULTS.md counts them). Rows are in chunk-id order, so column order is the tie rule's order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import sqlalchemy as sa

from rag_pipeline.retrieval import sql as retrieval_sql
from rag_pipeline.retrieval.trace import LegHit, RetrievalError

BLOCK_ROWS = 8192
"""Vectors scored per matrix product (their float64 copy: 32 MiB at 512 dimensions)."""


@dataclass(frozen=True)
class DenseIndex:
    """One KB's searchable vectors of one model: ``vectors[row]`` (float32) with their chunks, in chunk-id order."""

    knowledge_base_id: str
    model: str
    vectors: np.ndarray
    norms: np.ndarray  # float64 squared norms, summed as pgvector does before its square root
    chunk_ids: np.ndarray
    document_ids: np.ndarray
    document_names: np.ndarray

    @classmethod
    def load(cls, conn: sa.Connection, knowledge_base_id, model: str) -> DenseIndex:
        """Read the KB's searchable vectors of ``model`` on ``conn`` (binary, one row per chunk)."""
        dimension = retrieval_sql.model_dimension(conn, model)
        if dimension is None:
            raise RetrievalError(f"embedding model {model!r} is not registered in this database")
        rows = retrieval_sql.searchable_vector_rows(conn, knowledge_base_id, model).all()
        row_type = np.dtype([("dim", ">i2"), ("unused", ">i2"), ("x", ">f4", (int(dimension),))])
        data = np.frombuffer(b"".join(bytes(r.data) for r in rows), dtype=row_type)
        if len(data) and (data["dim"] != dimension).any():
            raise RetrievalError(f"knowledge base {knowledge_base_id}: a vector of model {model!r} is not "
                                 f"{dimension}-dimensional")
        vectors = np.ascontiguousarray(data["x"], dtype=np.float32).reshape(len(rows), int(dimension))
        return cls(str(knowledge_base_id), model, vectors, _squared_norms(vectors),
                   np.array([r.chunk_id for r in rows], dtype=object),
                   np.array([r.document_id for r in rows], dtype=object),
                   np.array([r.document_name for r in rows], dtype=object))

    def fits(self, knowledge_base_id, model: str) -> bool:
        return (self.knowledge_base_id, self.model) == (str(knowledge_base_id), model)

    def check(self, knowledge_base_id, model: str) -> None:
        if not self.fits(knowledge_base_id, model):
            raise ValueError(f"this vector index is of knowledge base {self.knowledge_base_id} and model "
                             f"{self.model!r}, not {knowledge_base_id} and {model!r}")

    def scores(self, query_vectors: np.ndarray) -> np.ndarray:
        """``(questions, chunks)`` float64 scores: ``1 - cosine distance`` as pgvector computes it."""
        q = np.asarray(query_vectors, dtype=np.float32)
        dot = np.empty((len(q), len(self.vectors)))
        for at in range(0, len(self.vectors), BLOCK_ROWS):  # float64 copies of a block at a time, not of the KB
            dot[:, at:at + BLOCK_ROWS] = q.astype(np.float64) @ self.vectors[at:at + BLOCK_ROWS].T.astype(np.float64)
        similarity = dot / np.sqrt(_squared_norms(q)[:, None] * self.norms[None, :])
        return 1.0 - (1.0 - np.clip(similarity, -1.0, 1.0))

    def top(self, query_vectors: np.ndarray, k: int) -> list[list[LegHit]]:
        """Per question, its top ``k`` by (score desc, chunk id asc)."""
        scores = self.scores(query_vectors)
        return [self._top_row(row, k) for row in scores]

    def _top_row(self, row: np.ndarray, k: int) -> list[LegHit]:
        row = np.where(np.isnan(row), -np.inf, row)  # a zero vector: pgvector's NaN distance sorts last
        if len(row) > k:
            kth = -np.partition(-row, k - 1)[k - 1]
            keep = np.flatnonzero(row >= kth)
        else:
            keep = np.arange(len(row))
        order = keep[np.lexsort((keep, -row[keep]))][:k]
        return list(map(LegHit, self.chunk_ids[order].tolist(), self.document_ids[order].tolist(),
                        self.document_names[order].tolist(), row[order].tolist()))

    def chunk_scores(self, query_vectors: np.ndarray, chunk_ids: Sequence[Sequence[str]]) -> list[dict[str, float]]:
        """Per question, ``{chunk id: score}`` of the listed chunks that have a searchable vector (the pool
        completion's look-up, in the leg's own arithmetic)."""
        out: list[dict[str, float]] = [{} for _ in chunk_ids]
        wanted = [i for i, ids in enumerate(chunk_ids) if ids]
        if not wanted:
            return out
        scores = self.scores(np.asarray(query_vectors)[wanted])
        for row, i in zip(scores, wanted, strict=True):
            ids = np.array(list(chunk_ids[i]), dtype=object)
            at = np.minimum(np.searchsorted(self.chunk_ids, ids), len(self.chunk_ids) - 1)
            found = self.chunk_ids[at] == ids
            out[i] = dict(zip(ids[found].tolist(), row[at[found]].tolist(), strict=True))
        return out


def _squared_norms(vectors: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64)
