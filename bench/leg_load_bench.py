"""Memory of loading an in-memory leg's index: the exact vector leg's
(:meth:`rag_pipeline.retrieval.dense_index.DenseIndex.load`) or the keyword leg's BM25 postings
(:meth:`rag_pipeline.retrieval.bm25_index.Bm25Index.load`, on 2 readers as a run reads them): the peak and kept
bytes by ``tracemalloc`` (Python and numpy allocations), per vector component or posting, the memory budget's
estimate, and the process's peak RSS; the numbers behind ``rag_pipeline/evaluation/memory_budget.py``.

Usage: ``python bench/leg_load_bench.py --knowledge-base synthetic-1000000-s0-text --leg vector|keyword
[--model use-multilingual-v3]`` (scratch database via ``RAG_PGDATA`` or ``RAG_DATABASE_URL``;
``bench/random_vectors.py`` gives a large knowledge base vectors)."""

from __future__ import annotations

import argparse
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rag_pipeline.evaluation import memory_budget
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError, resolve_knowledge_base
from rag_pipeline.knowledge_base.versions import content_version
from rag_pipeline.retrieval import bm25_sql
from rag_pipeline.retrieval.bm25_index import Bm25Index
from rag_pipeline.retrieval.dense_index import DenseIndex
from rag_pipeline.storage.snapshot_readers import snapshot_readers

READERS = 2


def measure(engine: sa.Engine, knowledge_base: str, leg: str, model: str = DEFAULT_MODEL) -> dict:
    """``leg``: ``vector`` (``model``'s exact index) or ``keyword`` (BM25, k1 0.9, b 0.4)."""
    with snapshot_readers(engine, READERS) as readers, readers.borrow() as conn:
        kb_id = resolve_knowledge_base(conn, knowledge_base).id
        if leg == "vector":
            vectors = content_version(conn, kb_id).embeddings.get(model, 0)
            estimate, units = memory_budget.vector_index_bytes(conn, model, vectors), "component"
        else:
            estimate, units = memory_budget.keyword_index_bytes(conn, kb_id), "posting"
        tracemalloc.start()
        t = time.perf_counter()
        if leg == "vector":
            index: DenseIndex | Bm25Index = DenseIndex.load(conn, kb_id, model)
            count = index.vectors.size
        else:
            count = bm25_sql.searchable_postings(conn, kb_id)
            index = Bm25Index.load(conn, kb_id, 0.9, 0.4, borrow=readers.borrow, parts=READERS)
        seconds = time.perf_counter() - t
        kept, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del index
    count = max(count, 1)
    return {"leg": leg, "units": units, "count": count, "load_s": seconds, "peak_mib": peak / 2**20,
            "peak_bytes_per_unit": peak / count, "kept_mib": kept / 2**20, "kept_bytes_per_unit": kept / count,
            "estimate_mib": estimate / 2**20, "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--knowledge-base", required=True)
    parser.add_argument("--leg", choices=("vector", "keyword"), required=True)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args(argv)
    from rag_pipeline.storage.engine import get_engine

    try:
        return _run(get_engine(), args)
    except KnowledgeBaseError as exc:
        raise SystemExit(f"{Path(__file__).name}: {exc}") from None


def _run(engine: sa.Engine, args: argparse.Namespace) -> int:
    r = measure(engine, args.knowledge_base, args.leg, args.model)
    print(f"{args.knowledge_base}, {r['leg']} leg: {r['count']:,} {r['units']}s: load {r['load_s']:.1f} s "
          f"(tracemalloc on), peak {r['peak_mib']:,.1f} MiB ({r['peak_bytes_per_unit']:.2f} B/{r['units']}), "
          f"kept {r['kept_mib']:,.1f} MiB ({r['kept_bytes_per_unit']:.2f} B/{r['units']}), budget estimate "
          f"{r['estimate_mib']:,.1f} MiB, process peak RSS {r['max_rss_mib']:,.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
