"""A new knowledge base's HNSW index: built once after its vectors are written (what ingestion does) vs inserted
vector by vector into an index created first (what ingestion did before).

SYNTHETIC data: ``bench/synthetic.py``'s Zipf documents with **RANDOM unit vectors** (512-d, the USE model's name;
benchmark only) — the worst case for HNSW (no cluster structure). For each size, two fresh knowledge bases of the
same documents under two names are ingested by :func:`ingestion.ingest_documents`:

- **bulk** (baseline: today's path): the KB has no index of the model, so ingestion writes every vector, commits,
  then builds the index in one pass (:func:`rag_pipeline.storage.engine.build_vector_index`);
- **incremental**: the KB's index is created empty first (:func:`ensure_embedding_model` with the KB's id), so
  the same ingestion inserts each vector into the graph as it COPYs it.

Printed per size: the whole ingestion's wall time for both and their ratio (incremental / bulk), the bulk path's
index build alone, and HNSW recall@10 of both indexes against exact search for 50 random queries (the graph
quality must not drop). Both KBs are deleted afterwards.

    RAG_PGDATA=/tmp/rag-bench python bench/index_build_bench.py --sizes 2000,10000,30000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import synthetic
from benchutil import machine_line

from rag_pipeline.knowledge_base import chunking, ingestion
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL
from rag_pipeline.retrieval import sql as retrieval_sql
from rag_pipeline.storage.engine import ensure_embedding_model, get_engine

DIM = 512


def ingest(engine: sa.Engine, docs, name: str, *, index_first: bool, seed: int) -> tuple[float, dict]:
    fake = synthetic.random_unit_embedder(DEFAULT_MODEL, seed)
    if index_first:
        with engine.begin() as conn:
            ensure_embedding_model(conn, fake.name, fake.dimension, fake.backend, chunking.knowledge_base_id(name))
    t = time.perf_counter()
    with mock.patch.object(ingestion, "get_embedder", lambda _name: fake):
        result = ingestion.ingest_documents(engine, docs, name, text_search=synthetic.TEXT_SEARCH,
                                            chunk_size=synthetic.CHUNK_SIZE, chunk_overlap=synthetic.CHUNK_OVERLAP,
                                            models=(DEFAULT_MODEL,))
    return time.perf_counter() - t, result.timings


def recall_at_10(engine: sa.Engine, name: str, queries: np.ndarray) -> float:
    params = {"kb": chunking.knowledge_base_id(name), "model": DEFAULT_MODEL, "k": 10, "query_vectors": list(queries)}
    with engine.begin() as conn:
        conn.execute(sa.text(retrieval_sql.VECTOR_SETTINGS_SQL), {"ef_search": 40})

        def top10(exact: bool) -> dict[int, set]:
            ids: dict[int, set] = {}
            for r in conn.execute(sa.text(retrieval_sql.vector_leg_sql(DIM, exact=exact)), params):
                ids.setdefault(r.query_index, set()).add(r.chunk_id)
            return ids

        approx, exact = top10(False), top10(True)
    return sum(len(approx.get(i, set()) & ids) for i, ids in exact.items()) / (10 * len(queries))


def drop(engine: sa.Engine, name: str) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM knowledge_bases WHERE name = :n"), {"n": name})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2000,10000,30000", help="chunks per knowledge base, comma-separated")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    engine = get_engine()
    print(machine_line())
    queries = np.random.default_rng(args.seed).standard_normal((50, DIM)).astype(np.float32)
    print("| chunks | bulk: ingestion (index build) | incremental: ingestion | incremental / bulk | recall@10 bulk / "
          "incremental |")
    print("|---:|---:|---:|---:|---|")
    for size in (int(s) for s in args.sizes.split(",") if s):
        docs, _ = synthetic.generate_documents(size, f"index-build-{size}", args.seed)
        names = {"bulk": f"index-build-bulk-{size}-s{args.seed}",
                 "incremental": f"index-build-incr-{size}-s{args.seed}"}
        for name in names.values():
            drop(engine, name)
        try:
            bulk_s, bulk_t = ingest(engine, docs, names["bulk"], index_first=False, seed=args.seed)
            incr_s, _ = ingest(engine, docs, names["incremental"], index_first=True, seed=args.seed)
            recall = {k: recall_at_10(engine, n, queries) for k, n in names.items()}
        finally:
            for name in names.values():
                drop(engine, name)
        build = bulk_t.get(f"index_build_{DEFAULT_MODEL}_s", float("nan"))
        print(f"| {size:,} | {bulk_s:.2f} s ({build:.2f} s) | {incr_s:.2f} s | {incr_s / bulk_s:.2f} | "
              f"{recall['bulk']:.3f} / {recall['incremental']:.3f} |", flush=True)
    print(machine_line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
