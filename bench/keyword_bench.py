"""BM25 keyword leg: the exhaustive SQL leg vs the in-memory index, side by side on one knowledge base.

For ``--questions`` questions (6–8 words of random chunks of the KB, in a question template, like the
synthetic datasets), in batches of 64 as the evaluation runs them, on one connection (one core):

- ``sql``: :data:`rag_pipeline.retrieval.bm25_sql.BM25_LEG_SQL` (scores every posting of the question's terms
  in PostgreSQL, top k by a window function) through ``hybrid_search_batch``;
- ``index``: :class:`rag_pipeline.retrieval.bm25_index.Bm25Index` — load once (timed), then the same
  ``hybrid_search_batch`` with ``keyword_index=`` (one SQL statement per batch for the question lexemes, numpy
  for the rest); ``index_topk`` is the numpy part alone.

Both legs' pools are compared: identical ids, order and scores (bit for bit) are required, else exit 1.
The last line is ``sql_ms_per_q=.. index_ms_per_q=.. leg_ms_per_q=.. topk_ms_per_q=.. load_s=.. identical=..``
(``leg``: the in-memory keyword leg itself, i.e. one lexeme statement per batch + numpy, without fusion).

Usage: python bench/keyword_bench.py --kb synthetic-100000-s0 [--questions 512] [--k 100]
Database: ``RAG_DATABASE_URL`` or the embedded server in ``RAG_PGDATA``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rag_pipeline.knowledge_base import textsearch
from rag_pipeline.knowledge_base.chunking import knowledge_base_id
from rag_pipeline.retrieval.bm25_index import Bm25Index
from rag_pipeline.retrieval.search import hybrid_search_batch
from rag_pipeline.retrieval.strategies import Strategy
from rag_pipeline.storage.engine import get_engine

BATCH = 64


def questions_of(conn, kb_id, n: int, seed: int) -> list[str]:
    rows = conn.execute(sa.text(
        "SELECT content FROM document_chunks WHERE knowledge_base_id = :kb AND is_current "
        "ORDER BY md5(id::text || :seed) LIMIT :n"), {"kb": kb_id, "n": n, "seed": str(seed)}).scalars().all()
    rng = np.random.default_rng(seed)
    out = []
    for text in rows:
        words = [w.strip(".,;:!?") for w in text.split()]
        picked = sorted(rng.choice(len(words), size=min(len(words), int(rng.integers(6, 9))), replace=False))
        out.append("Where can I find " + " ".join(words[i] for i in picked) + "?")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", required=True, help="knowledge base name (e.g. synthetic-100000-s0)")
    parser.add_argument("--questions", type=int, default=512)
    parser.add_argument("--k", type=int, default=100, help="keyword_candidate_k (hybrid-bm25-v1: 100)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    strategy = Strategy(version="bench-bm25", vector_candidate_k=0, keyword_candidate_k=args.k, keyword_scorer="bm25",
                        bm25_k1=0.9, bm25_b=0.4, vector_weight=0.0, keyword_weight=1.0)
    engine = get_engine()
    kb_id = knowledge_base_id(args.kb)
    print(f"keyword bench: KB {args.kb}, {args.questions} questions, k={args.k}, load {os.getloadavg()[0]:.2f}")
    with engine.connect() as conn:
        questions = questions_of(conn, kb_id, args.questions, args.seed)
        kb = conn.execute(sa.text("SELECT chunk_count, text_search FROM knowledge_bases WHERE id = :kb"),
                          {"kb": kb_id}).one()
        batches = [questions[i:i + BATCH] for i in range(0, len(questions), BATCH)]
        hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=batches[0][:8], strategy=strategy)  # warm
        t = time.perf_counter()
        sql = [tr for b in batches for tr in hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=b,
                                                                  strategy=strategy)]
        sql_s = time.perf_counter() - t
        t = time.perf_counter()
        index = Bm25Index.load(conn, kb_id, strategy.bm25_k1, strategy.bm25_b)
        load_s = time.perf_counter() - t
        t = time.perf_counter()
        mem = [tr for b in batches for tr in hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=b,
                                                                  strategy=strategy, keyword_index=index)]
        index_s = time.perf_counter() - t
        cfg = textsearch.regconfig(kb.text_search)
        prepared = [[textsearch.prepare(kb.text_search, q) for q in b] for b in batches]
        t = time.perf_counter()
        for b in prepared:
            index.leg(conn, kb_id, strategy, cfg, b)
        leg_s = time.perf_counter() - t
        terms = [tm for b in prepared for tm in index.query_terms(conn, cfg, b)]
    t = time.perf_counter()
    for tm in terms:
        index.top(tm, args.k)
    topk_s = time.perf_counter() - t
    identical = all(a.candidates == b.candidates for a, b in zip(sql, mem, strict=True))
    matches = [len(index.scores(tm)[0]) for tm in terms]
    postings = index.matrix.nnz
    n = len(questions)
    print(f"KB: {kb.chunk_count} chunks, {postings} postings, {index.matrix.shape[0]} lexemes; "
          f"matching chunks per question: median {int(np.median(matches))}, max {max(matches)}")
    print(f"sql (exhaustive BM25 in PostgreSQL): {sql_s:.2f}s = {1000 * sql_s / n:.2f} ms/question")
    print(f"index: load {load_s:.2f}s once ({index.matrix.data.nbytes / 2**20:.0f} MiB of weights), then "
          f"{index_s:.2f}s = {1000 * index_s / n:.3f} ms/question through hybrid_search_batch (incl. fusion of the "
          f"pool); the keyword leg itself (lexeme statement + top-k) {1000 * leg_s / n:.3f} ms/question, numpy "
          f"top-k alone {1000 * topk_s / n:.3f} ms/question")
    print(f"identical pools (ids, order, bit-equal scores): {identical}; load is repaid after "
          f"{load_s / max(sql_s / n - index_s / n, 1e-9):.0f} questions")
    print(f"sql_ms_per_q={1000 * sql_s / n:.3f} index_ms_per_q={1000 * index_s / n:.3f} "
          f"leg_ms_per_q={1000 * leg_s / n:.3f} "
          f"topk_ms_per_q={1000 * topk_s / n:.4f} load_s={load_s:.2f} identical={identical}")
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
