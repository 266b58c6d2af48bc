"""SYNTHETIC random unit vectors of one model for every current chunk of a knowledge base that has none, written by
binary COPY without an HNSW index (benchmark only; not real data).

At 1,000,000 chunks an HNSW build is beyond this 2-core machine, while an exact strategy (``vector_search: exact``)
needs no index. This gives such a strategy a knowledge base of that size: ``synthetic.py --text-only`` first, then
this. The vectors carry no meaning (seeded standard normal, L2-normalised), as in ``synthetic.py``; they are written
with the project's own COPY (:func:`rag_pipeline.knowledge_base.queries.vectors.copy_vectors`) in one transaction.
A strategy that reads the HNSW index has none to read here: its statement scans every vector.

Usage: ``python bench/random_vectors.py --knowledge-base synthetic-1000000-s0-text [--model use-multilingual-v3]``
(scratch database via ``RAG_PGDATA`` or ``RAG_DATABASE_URL``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import sqlalchemy as sa
from pgvector.psycopg import register_vector

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL, get_embedder
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError, resolve_knowledge_base
from rag_pipeline.knowledge_base.queries import vectors
from rag_pipeline.storage.engine import driver_connection, ensure_embedding_model

BATCH = 50_000


def add_random_vectors(engine: sa.Engine, knowledge_base: str, model: str, seed: int = 0, log=print) -> int:
    """Write a random unit vector of ``model`` for each current chunk of ``knowledge_base`` without one; how many."""
    real = get_embedder(model)  # the registered name, dimension and backend label
    rng = np.random.default_rng(seed + 2_000_003)
    with engine.begin() as conn:
        kb_id = resolve_knowledge_base(conn, knowledge_base).id
        ensure_embedding_model(conn, real.name, real.dimension, real.backend)
        ids = [row.id for row in vectors.chunks_without_vector(conn, kb_id, real.name)]
        raw = driver_connection(conn)
        register_vector(raw)
        t0 = time.perf_counter()
        for start in range(0, len(ids), BATCH):
            batch = ids[start:start + BATCH]
            v = rng.standard_normal((len(batch), real.dimension), dtype=np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            vectors.copy_vectors(raw, kb_id, real.name, batch, v)
            log(f"{start + len(batch):,} / {len(ids):,} vectors, {time.perf_counter() - t0:.0f} s")
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        vectors.analyze(conn)
    return len(ids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--knowledge-base", required=True)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from rag_pipeline.storage.engine import get_engine

    try:
        return _run(get_engine(), args)
    except KnowledgeBaseError as exc:
        raise SystemExit(f"{Path(__file__).name}: {exc}") from None


def _run(engine: sa.Engine, args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    n = add_random_vectors(engine, args.knowledge_base, args.model, args.seed)
    print(f"SYNTHETIC {args.knowledge_base}: {n:,} random {args.model} vectors in {time.perf_counter() - t0:.1f} s "
          "(no HNSW index)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
