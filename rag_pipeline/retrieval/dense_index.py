"""Exact vector leg in memory: a knowledge base's vectors of one model loaded once (per evaluation run).

The same candidates as the SQL exact statement (``sql.VECTOR_LEG_EXACT_SQL``, a strategy with ``vector_search:
exact``): every searchable vector scored, the top k by (score desc, chunk id asc), ties at the k-th score
resolved by chunk id. The score is pgvector's expression ``1 - (1 - clamp(cosine similarity))`` evaluated in
float64 from the stored float32 vectors (a float32 matrix product per batch picks each question's candidates,
which are then scored in float64: :meth:`DenseIndex.top`); pgvector sums in float32, so a score
differs from the SQL's by about 1e-7 at most, and two chunks closer than that may swap places (a float tie:
bench/RESULTS.md counts them). Rows are in chunk-id order, so column order is the tie rule's order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import sqlalchemy as sa

from rag_pipeline.retrieval import sql as retrieval_sql
from rag_pipeline.retrieval.trace import LegHit, RetrievalError
from rag_pipeline.storage.engine import BINARY_COPY_SIGNATURE

BLOCK_ROWS = 8192
"""Chunks of one question scored exactly at a time (their float32 rows: 16 MiB at 512 dimensions)."""
LOAD_ROWS = 16384
"""Vectors read from the database at a time while loading (32 MiB of binary rows at 512 dimensions)."""


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
        """Read the KB's searchable vectors of ``model`` on ``conn``: their chunks in chunk-id order first (no
        vectors), then every vector by binary COPY, :data:`LOAD_ROWS` rows at a time, each put in its chunk's row of
        the float32 matrix (the peak is about the matrix itself). A vector whose chunk is not searchable is
        skipped; on a ``conn`` without a snapshot, a chunk whose vector went between the two statements is
        dropped."""
        dimension = retrieval_sql.model_dimension(conn, model)
        if dimension is None:
            raise RetrievalError(f"embedding model {model!r} is not registered in this database")
        d = int(dimension)
        chunk_ids: list[str] = []
        documents: list[tuple[str, str]] = []
        same: dict[tuple[str, str], tuple[str, str]] = {}  # one (id, name) object per document, not one per chunk
        for r in retrieval_sql.searchable_vector_chunks(conn, knowledge_base_id, model):
            chunk_ids.append(r.chunk_id)
            documents.append(same.setdefault((r.document_id, r.document_name), (r.document_id, r.document_name)))
        keys = np.array(chunk_ids, dtype="S36")
        if len(keys) > 1 and not (keys[:-1] < keys[1:]).all():  # pragma: no cover - uuid order is its text's order
            raise RetrievalError(f"knowledge base {knowledge_base_id}: chunk ids not in increasing order")
        vectors = np.empty((len(keys), d), np.float32)
        filled = np.zeros(len(keys), dtype=bool)
        reader = _CopyRows(d, lambda rows: _place(rows, keys, vectors, filled, knowledge_base_id, model))
        for data in retrieval_sql.vector_copy(conn, knowledge_base_id, model):
            reader.feed(data)
        reader.end(knowledge_base_id)
        ids, document_ids, document_names = (np.array(chunk_ids, dtype=object),
                                             np.array([i for i, _ in documents], dtype=object),
                                             np.array([name for _, name in documents], dtype=object))
        if not filled.all():  # listed without a vector (no snapshot): not searchable after all
            vectors, ids, document_ids, document_names = (a[filled] for a in (vectors, ids, document_ids,
                                                                                document_names))
        return cls(str(knowledge_base_id), model, vectors, _squared_norms(vectors), ids, document_ids,
                   document_names)

    def fits(self, knowledge_base_id, model: str) -> bool:
        return (self.knowledge_base_id, self.model) == (str(knowledge_base_id), model)

    def check(self, knowledge_base_id, model: str) -> None:
        if not self.fits(knowledge_base_id, model):
            raise ValueError(f"this vector index is of knowledge base {self.knowledge_base_id} and model "
                             f"{self.model!r}, not {knowledge_base_id} and {model!r}")

    def top(self, query_vectors: np.ndarray, k: int) -> list[list[LegHit]]:
        """Per question, its top ``k`` by (score desc, chunk id asc).

        One float32 matrix product per batch finds each question's candidates: the chunks whose float32
        similarity is within :func:`float32_margin` of the question's k-th best. By the error bound of a float32
        dot product they include the exact top k and every chunk tied with its k-th. Only those are scored
        exactly (:meth:`pair_scores`, the SQL's expression in float64). A question or chunk whose float32
        similarity is not finite (a zero vector) is scored exactly as well."""
        q = np.asarray(query_vectors, dtype=np.float32)
        n = len(self.vectors)
        if not len(q):
            return []
        everything = np.arange(n)
        if n <= k:
            chosen = [everything] * len(q)
        else:
            rough, odd = self._rough_similarity(q)
            kth = np.partition(rough, n - k, axis=1)[:, n - k]  # the k-th largest (no negated copy of rough)
            margin = float32_margin(q.shape[1])
            chosen = [np.union1d(np.flatnonzero(row >= kth[i] - margin), odd) if np.isfinite(kth[i]) else everything
                      for i, row in enumerate(rough)]
        rows = np.repeat(np.arange(len(q)), [len(c) for c in chosen])
        columns = np.concatenate(chosen) if chosen else np.empty(0, dtype=np.intp)
        scores = np.split(self.pair_scores(q, rows, columns), np.cumsum([len(c) for c in chosen])[:-1])
        out = []
        for cols, row in zip(chosen, scores, strict=True):
            keep = np.lexsort((cols, -row))[:k]  # cols ascend: chunk-id order
            out.append(list(map(LegHit, self.chunk_ids[cols[keep]].tolist(), self.document_ids[cols[keep]].tolist(),
                                self.document_names[cols[keep]].tolist(), row[keep].tolist())))
        return out

    def _rough_similarity(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(questions, chunks)`` float32 cosine similarities (-inf where not finite), and the columns whose
        similarity float32 cannot express for some question (a zero vector, or one so long that float32 overflows):
        those are always scored exactly. A question float32 cannot express is all -inf (scored exactly whole)."""
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            inverse_q = (1.0 / np.sqrt(_squared_norms(q))).astype(np.float32)
            inverse_v = (1.0 / np.sqrt(self.norms)).astype(np.float32)
            rough = q @ self.vectors.T
            rough *= inverse_q[:, None]
            rough *= inverse_v[None, :]
        bad = ~np.isfinite(rough)
        if not bad.any():
            return rough, np.empty(0, dtype=np.intp)
        comparable = np.isfinite(inverse_q)
        odd = np.flatnonzero(bad[comparable].any(axis=0))
        rough[bad] = -np.inf
        rough[~comparable] = -np.inf
        return rough, odd

    def pair_scores(self, query_vectors: np.ndarray, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        """float64 scores of question ``rows[i]`` against chunk ``columns[i]``: ``1 - cosine distance`` as pgvector
        computes it (-inf where undefined: a zero vector, whose NaN distance pgvector sorts last). Pairs of one
        question side by side are scored together (a float64 matrix-vector product of their chunks, at most
        :data:`BLOCK_ROWS` at a time)."""
        q = np.asarray(query_vectors, dtype=np.float32)
        q64, q_norms = q.astype(np.float64), _squared_norms(q)
        out = np.empty(len(rows))
        edges = [0, *(np.flatnonzero(np.diff(rows)) + 1).tolist(), len(rows)] if len(rows) else [0]
        for start, end in zip(edges, edges[1:], strict=False):
            row = rows[start]
            for at in range(start, end, BLOCK_ROWS):
                stop = min(at + BLOCK_ROWS, end)
                c = columns[at:stop]
                dot = np.einsum("ij,j->i", self.vectors[c], q64[row], dtype=np.float64)
                with np.errstate(divide="ignore", invalid="ignore"):
                    similarity = dot / np.sqrt(q_norms[row] * self.norms[c])
                out[at:stop] = 1.0 - (1.0 - np.clip(similarity, -1.0, 1.0))
        out[np.isnan(out)] = -np.inf
        return out

    def chunk_scores(self, query_vectors: np.ndarray, chunk_ids: Sequence[Sequence[str]]) -> list[dict[str, float]]:
        """Per question, ``{chunk id: score}`` of the listed chunks that have a searchable vector (the pool
        completion's look-up, in the leg's own arithmetic)."""
        found_ids: list[np.ndarray] = []
        found_columns: list[np.ndarray] = []
        for ids in chunk_ids:
            wanted = np.array(list(ids), dtype=object)
            at = np.minimum(np.searchsorted(self.chunk_ids, wanted), max(len(self.chunk_ids) - 1, 0))
            hit = self.chunk_ids[at] == wanted if len(self.chunk_ids) else np.zeros(len(wanted), dtype=bool)
            found_ids.append(wanted[hit])
            found_columns.append(at[hit])
        sizes = [len(c) for c in found_columns]
        rows = np.repeat(np.arange(len(chunk_ids)), sizes)
        columns = np.concatenate(found_columns) if found_columns else np.empty(0, dtype=np.intp)
        scores = np.split(self.pair_scores(query_vectors, rows, columns), np.cumsum(sizes)[:-1]) if sizes else []
        return [dict(zip(ids.tolist(), row.tolist(), strict=True)) for ids, row in zip(found_ids, scores, strict=True)]


def float32_margin(dimension: int) -> float:
    """How far below a question's k-th float32 similarity a chunk of its exact top k can fall: twice the bound
    ``gamma_n = n u / (1 - n u)`` (u = 2**-24) on the error of a float32 dot product of length n, in any order of
    summation, relative to ``|q| |v|`` (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §3.1),
    with 16 more roundings for the two norm scalings. Twice: the k-th itself may be off by as much."""
    n = dimension + 16
    u = float(np.finfo(np.float32).eps) / 2
    return 2 * n * u / (1 - n * u)


def _squared_norms(vectors: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64)


_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_UUID_DIGITS = np.array([*range(8), *range(9, 13), *range(14, 18), *range(19, 23), *range(24, 36)])
"""The positions of a canonical uuid text's 32 hex digits (the others are dashes)."""


class _CopyRows:
    """Binary COPY rows ``(uuid, vector)`` of dimension ``d`` from data blocks of any size: every
    :data:`LOAD_ROWS` whole rows go to ``take`` as one structured array (big-endian, as sent)."""

    def __init__(self, d: int, take):
        self.row = np.dtype([("fields", ">i2"), ("id_size", ">i4"), ("id", "u1", (16,)), ("vector_size", ">i4"),
                             ("dim", ">i2"), ("unused", ">i2"), ("x", ">f4", (d,))])
        self.take, self.buffer, self.header = take, bytearray(), True

    def feed(self, data) -> None:
        self.buffer += data
        if self.header:
            if len(self.buffer) < 19:
                return
            if bytes(self.buffer[:11]) != BINARY_COPY_SIGNATURE:
                raise RetrievalError("the vectors' COPY data does not start with the binary COPY signature")
            skip = 19 + int.from_bytes(self.buffer[15:19], "big")
            if len(self.buffer) < skip:
                return
            del self.buffer[:skip]
            self.header = False
        if len(self.buffer) >= LOAD_ROWS * self.row.itemsize:
            self._rows()

    def _rows(self) -> None:
        whole = len(self.buffer) // self.row.itemsize
        if whole:
            self.take(np.frombuffer(self.buffer, dtype=self.row, count=whole))  # a view, released on return
            del self.buffer[:whole * self.row.itemsize]

    def end(self, knowledge_base_id) -> None:
        """The last rows; what is left must be the trailer (int16 -1)."""
        self._rows()
        if self.header or bytes(self.buffer) != b"\xff\xff":
            where = "before its header" if self.header else "out of step with its rows"
            raise RetrievalError(f"knowledge base {knowledge_base_id}: the vectors' data from the database ended "
                                 f"{where} ({len(self.buffer)} bytes left)")


def _place(rows: np.ndarray, keys: np.ndarray, vectors: np.ndarray, filled: np.ndarray, knowledge_base_id,
           model: str) -> None:
    """Put each COPY row's vector in the row of its chunk id in ``keys`` (sorted uuid texts); skip the others."""
    d = vectors.shape[1]
    if ((rows["fields"] != 2) | (rows["id_size"] != 16) | (rows["vector_size"] != 4 + 4 * d)
            | (rows["dim"] != d)).any():
        raise RetrievalError(f"knowledge base {knowledge_base_id}: a vector of model {model!r} is not "
                             f"{d}-dimensional")
    raw = rows["id"]
    text = np.full((len(rows), 36), ord("-"), dtype=np.uint8)
    text[:, _UUID_DIGITS] = np.stack([_HEX[raw >> 4], _HEX[raw & 15]], axis=2).reshape(len(rows), 32)
    ids = text.view("S36").ravel()
    at = np.minimum(np.searchsorted(keys, ids), max(len(keys) - 1, 0))
    found = keys[at] == ids if len(keys) else np.zeros(len(ids), dtype=bool)
    vectors[at[found]] = rows["x"][found]  # big-endian to native float32
    filled[at[found]] = True
