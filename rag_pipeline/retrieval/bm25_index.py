"""The keyword legs in memory: a knowledge base's postings loaded once (per evaluation run) into sparse matrices.

Both keyword scorers run here, each with the same top k, tie order and bit-identical scores as its SQL statement,
at a fraction of its cost (bench/RESULTS.md, "Keyword top-k"):

- **BM25** (:mod:`rag_pipeline.retrieval.bm25_sql`): the inputs are the same rows (``idf`` computed by the server
  with the SQL leg's expression), each contribution is evaluated in float64 with the SQL's operand order, and a
  chunk's score sums them in lexeme order (matrix rows numbered by the server's ``ORDER BY lexeme``).
- **ts_rank_cd** (``ts_rank_cd(tsvector, OR-query, 32)``, hybrid-v1's scorer): see :func:`ts_rank_cd_scores`.

Columns are in chunk-id order; the top k is every match at or above the k-th best score, sorted by (score desc,
column asc). :meth:`Bm25Index.load` reads on the connection it is given (in an evaluation, the run's snapshot
readers)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp
import sqlalchemy as sa

from rag_pipeline.retrieval import bm25_sql
from rag_pipeline.retrieval.trace import LegHit

_UUID = np.dtype([("hi", ">u8"), ("lo", ">u8")])  # a uuid's 16 bytes as two big-endian integers: same order
_POSTING = np.dtype([("hi", ">u8"), ("lo", ">u8"), ("tf", ">i4")])
POSTING_ROWS = 64
"""Lexemes (rows of their postings) read from the database at a time while loading."""


def _columns(keys: np.ndarray, postings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each posting's column (its chunk's index in ``keys``, ascending uuids) and whether it has one (a chunk that
    is not searchable has none): a binary search on the first 8 bytes as integers, then on all 16 where they tie."""
    hi, lo = keys["hi"].astype(np.uint64), keys["lo"].astype(np.uint64)
    if len(keys) > 1 and not ((hi[1:] > hi[:-1]) | ((hi[1:] == hi[:-1]) & (lo[1:] > lo[:-1]))).all():
        raise RuntimeError("chunk ids are not in byte order")  # pragma: no cover - guards the ORDER BY
    p_hi, p_lo = postings["hi"].astype(np.uint64), postings["lo"].astype(np.uint64)
    if len(hi) > 1 and (hi[1:] == hi[:-1]).any():  # two chunk ids share their first 8 bytes: search all 16
        wanted = np.empty(len(postings), dtype=_UUID)
        wanted["hi"], wanted["lo"] = postings["hi"], postings["lo"]
        col = np.searchsorted(keys.view("S16"), wanted.view("S16"))
    else:
        col = np.searchsorted(hi, p_hi)
    found = col < len(keys)
    found[found] = (hi[col[found]] == p_hi[found]) & (lo[col[found]] == p_lo[found])
    return col, found


def _lexeme_ranges(terms: Sequence, parts: int) -> list[tuple[str | None, str | None]]:
    """``parts`` consecutive ``[first, after)`` ranges of the lexemes (server order) holding about equal numbers of
    postings (a lexeme's doc_freq); ``None`` = open end, so every lexeme of the table falls in exactly one."""
    if parts <= 1 or len(terms) < 2 * parts:
        return [(None, None)]
    cumulative = np.cumsum([t.doc_freq for t in terms])
    cuts = sorted({int(np.searchsorted(cumulative, cumulative[-1] * i / parts)) + 1 for i in range(1, parts)})
    bounds = [None] + [terms[c].lexeme for c in cuts if 0 < c < len(terms)] + [None]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


_D_WEIGHT = float(np.float32(0.1))  # PostgreSQL's default weight of label D, a float4 (tsrank.c ``weights``)
_COVER = 1.0 / (1.0 / _D_WEIGHT)  # calc_rank_cd's Cpos of a one-position cover of weight D: 1 / invws[D]
_cover_sums = [np.zeros(1)]  # the running sums, grown as longer chunks come


def ts_rank_cd_scores(counts: np.ndarray) -> np.ndarray:
    """``ts_rank_cd(tsvector, q, 32)`` of chunks that hold ``counts`` positions of the OR-query ``q``'s lexemes.

    Why it is that simple (PostgreSQL's tsrank.c, ``calc_rank_cd``): for an OR of plain lexemes every matching
    position is a cover of its own (``Cover`` stops at the first position that satisfies the query, upwards and
    downwards), so each adds ``Cpos = 1 / invws[weight]`` with no noise term; the sum ``Wdoc`` (double, in position
    order) then becomes ``Wdoc / (Wdoc + 1)`` (normalisation 32) and a float4. The project's tsvectors come from
    ``to_tsvector`` without ``setweight``: every position has weight D, so ``Wdoc`` is ``Cpos`` added ``n`` times,
    taken here from a table of those running sums (``np.cumsum`` adds left to right, as the C loop does); the
    count ``n`` is the chunk's ``chunk_terms.tf`` (the lexeme's positions) summed over the question's lexemes."""
    top, sums = int(counts.max(initial=0)), _cover_sums[0]
    if top >= len(sums):
        sums = _cover_sums[0] = np.concatenate(([0.0], np.cumsum(np.full(max(top, 2 * len(sums)), _COVER))))
    w = sums[counts]
    return (w / (w + 1.0)).astype(np.float32).astype(np.float64)


@dataclass(frozen=True)
class Bm25Index:
    """One KB's keyword postings: the BM25 contributions for one (k1, b), ``matrix[term row, chunk column]``, and
    each posting's position count (``counts``, same rows and columns: the ts_rank_cd scorer's input)."""

    knowledge_base_id: str
    k1: float
    b: float
    matrix: sp.csr_array
    term_row: dict[str, int]
    chunk_ids: np.ndarray  # column -> chunk id (str), ascending
    document_ids: np.ndarray
    document_names: np.ndarray
    counts: sp.csr_array

    @classmethod
    def load(cls, conn: sa.Connection, knowledge_base_id, k1: float, b: float,
             borrow: Callable[[], AbstractContextManager[sa.Connection]] | None = None, parts: int = 1) -> Bm25Index:
        """Read the KB's searchable postings and statistics on ``conn``; with ``borrow`` (connections on the same
        snapshot) in ``parts`` lexeme ranges read at once, ``conn`` reading the first."""
        kb, chunks, terms = bm25_sql.index_inputs(conn, knowledge_base_id)
        term_row = {t.lexeme: i for i, t in enumerate(terms)}
        ranges = _lexeme_ranges(terms, parts if borrow is not None else 1)

        def read(conn: sa.Connection, first: str | None, after: str | None) -> list:
            result = bm25_sql.postings(conn, knowledge_base_id, first, after, POSTING_ROWS)
            return [(term_row[r.lexeme], r.n, r.data) for part in result.partitions(POSTING_ROWS) for r in part
                    if r.lexeme in term_row]

        def read_borrowed(first: str | None, after: str | None) -> list:
            assert borrow is not None, "only ranges beyond the first are borrowed"
            with borrow() as other:
                return read(other, first, after)

        with ThreadPoolExecutor(max_workers=max(len(ranges) - 1, 1)) as pool:
            others = [pool.submit(read_borrowed, *r) for r in ranges[1:]]
            rows = read(conn, *ranges[0]) + [row for f in others for row in f.result()]
        rows.sort()  # by matrix row: the CSR rows are then built in place
        postings = np.frombuffer(b"".join(r[2] for r in rows), dtype=_POSTING)
        term = np.repeat(np.array([r[0] for r in rows], dtype=np.int64), [r[1] for r in rows])
        del rows  # each array below is freed once it has been used: the peak is a few arrays of the postings
        keys = np.frombuffer(b"".join(bytes(c.key) for c in chunks), dtype=_UUID)  # uuid order = (hi, lo) order
        col, found = _columns(keys, postings)
        everything = bool(found.all())  # the usual case: every posting's chunk is searchable, nothing to select
        tf = (postings["tf"] if everything else postings["tf"][found]).astype(np.float64)
        del postings
        if not everything:
            term, col = term[found], col[found]
        indptr = np.concatenate(([0], np.cumsum(np.bincount(term, minlength=len(terms)))))
        weight = np.array([t.idf for t in terms], dtype=np.float64)[term]
        del term
        denominator = np.array([c.token_count for c in chunks], dtype=np.float64)[col]
        k1, b = float(k1), float(b)
        # bm25_sql's expression, in place in the same order of operations (the same bits):
        # idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
        np.multiply(denominator, b, out=denominator)
        np.divide(denominator, float(kb.avgdl or 1.0), out=denominator)
        np.add(denominator, 1.0 - b, out=denominator)
        np.multiply(denominator, k1, out=denominator)
        np.add(denominator, tf, out=denominator)
        np.multiply(weight, tf, out=weight)
        np.multiply(weight, k1 + 1.0, out=weight)
        np.divide(weight, denominator, out=weight)
        del denominator
        matrix = sp.csr_array((weight, col, indptr), shape=(len(terms), len(chunks)))
        counts = sp.csr_array((tf.astype(np.int64), col, indptr), shape=(len(terms), len(chunks)))
        return cls(str(knowledge_base_id), k1, b, matrix, term_row,
                   np.array([c.chunk_id for c in chunks], dtype=object),
                   np.array([c.document_id for c in chunks], dtype=object),
                   np.array([c.document_name for c in chunks], dtype=object), counts)

    @cached_property
    def documents(self) -> dict[str, tuple[str, str]]:
        """Every searchable chunk of the index's snapshot: chunk id -> (document id, document name)."""
        return dict(zip(self.chunk_ids.tolist(),
                        zip(self.document_ids.tolist(), self.document_names.tolist(), strict=True), strict=True))

    def fits(self, knowledge_base_id, k1: float, b: float) -> bool:
        return (self.knowledge_base_id, self.k1, self.b) == (str(knowledge_base_id), float(k1), float(b))

    def leg(self, conn: sa.Connection, knowledge_base_id, strategy, cfg: str, query_texts: Sequence[str],
            targets: Sequence[Sequence[str]] | None = None) -> tuple[list[list[LegHit]], list[dict[str, dict]]]:
        """The keyword leg of a batch (``search._keyword_leg``'s contract): hits per question, best first, and
        per question the targets (canonical chunk ids) ranked below ``strategy.keyword_candidate_k``."""
        if strategy.keyword_scorer == "ts_rank_cd" and self.knowledge_base_id != str(knowledge_base_id):
            raise ValueError(f"this keyword index is of knowledge base {self.knowledge_base_id}, not "
                             f"{knowledge_base_id}")
        if strategy.keyword_scorer == "bm25" and not self.fits(knowledge_base_id, strategy.bm25_k1, strategy.bm25_b):
            raise ValueError(f"this BM25 index is of knowledge base {self.knowledge_base_id} with k1={self.k1}, "
                             f"b={self.b}, not {knowledge_base_id} with k1={strategy.bm25_k1}, b={strategy.bm25_b}")
        wanted = targets if targets is not None else [() for _ in query_texts]
        scorer = strategy.keyword_scorer
        legs = [self.top(terms, strategy.keyword_candidate_k, want, scorer)
                for terms, want in zip(self.query_terms(conn, cfg, query_texts), wanted, strict=True)]
        return [hits for hits, _ in legs], [found for _, found in legs]

    def query_terms(self, conn: sa.Connection, cfg: str, query_texts: Sequence[str]) -> list[np.ndarray]:
        """Per question, the matrix rows of its lexemes (those with a df), ascending = lexeme order."""
        rows: list[set[int]] = [set() for _ in query_texts]
        for r in bm25_sql.query_lexemes(conn, cfg, query_texts):
            row = self.term_row.get(r.lexeme)
            if row is not None:
                rows[r.query_index - 1].add(row)
        return [np.array(sorted(s), dtype=np.int64) for s in rows]

    def scores(self, terms: np.ndarray, scorer: str = "bm25") -> tuple[np.ndarray, np.ndarray]:
        """``(columns, scores)`` of every chunk matching a term, columns ascending (chunk-id order)."""
        if scorer == "ts_rank_cd":
            c = self.counts
            n = np.zeros(c.shape[1], dtype=np.int64)
            for t in terms:
                lo, hi = c.indptr[t], c.indptr[t + 1]
                n[c.indices[lo:hi]] += c.data[lo:hi]
            cols = np.flatnonzero(n != 0)  # numpy finds the set entries of a boolean array several times faster
            return cols, ts_rank_cd_scores(n[cols])
        if scorer != "bm25":
            raise ValueError(f"unknown keyword scorer {scorer!r}")
        m = self.matrix
        acc = np.zeros(m.shape[1])
        for t in terms:  # term by term in lexeme order: the SQL's ordered sum, bit for bit
            lo, hi = m.indptr[t], m.indptr[t + 1]
            acc[m.indices[lo:hi]] += m.data[lo:hi]  # a lexeme's postings hold each chunk once
        cols = np.flatnonzero(acc != 0)  # every contribution is > 0 (idf > 0, tf >= 1); a boolean array is faster
        return cols, acc[cols]

    def top(self, terms: np.ndarray, k: int, targets: Sequence[str] = (),
            scorer: str = "bm25") -> tuple[list[LegHit], dict[str, dict]]:
        """The leg's top ``k`` (score desc, chunk id asc) and, for each of ``targets`` ranked below k, its
        ``{"keyword_score", "keyword_rank"}`` (both None: no query term in the chunk)."""
        cols, acc = self.scores(terms, scorer)
        if len(cols) > k:
            kth = -np.partition(-acc, k - 1)[k - 1]
            keep = np.flatnonzero(acc >= kth)
        else:
            keep = np.arange(len(cols))
        order = keep[np.lexsort((cols[keep], -acc[keep]))][:k]
        top_cols = cols[order]
        hits = list(map(LegHit, self.chunk_ids[top_cols].tolist(), self.document_ids[top_cols].tolist(),
                        self.document_names[top_cols].tolist(), acc[order].tolist()))
        below: dict[str, dict] = {}
        top_ids = {h.chunk_id for h in hits}
        for chunk_id in targets:
            if chunk_id in top_ids:
                continue
            col = np.searchsorted(self.chunk_ids, chunk_id)
            at = np.searchsorted(cols, col)
            if col >= len(self.chunk_ids) or self.chunk_ids[col] != chunk_id or at >= len(cols) or cols[at] != col:
                below[chunk_id] = {"keyword_score": None, "keyword_rank": None}
                continue
            s = acc[at]
            rank = 1 + int(np.count_nonzero(acc > s)) + int(np.count_nonzero((acc == s) & (cols < col)))
            below[chunk_id] = {"keyword_score": float(s), "keyword_rank": rank}
        return hits, below
