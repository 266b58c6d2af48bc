"""Memory of loading the exact vector leg's index (:meth:`rag_pipeline.retrieval.dense_index.DenseIndex.load`):
its peak and kept bytes by ``tracemalloc`` (Python and numpy allocations), per vector component, and the process's
peak RSS; the numbers behind ``rag_pipeline/evaluation/memory_budget.py``'s vector estimate.

Usage: ``python bench/dense_load_bench.py --knowledge-base synthetic-1000000-s0-text [--model use-multilingual-v3]``
(scratch database via ``RAG_PGDATA`` or ``RAG_DATABASE_URL``; ``bench/random_vectors.py`` gives a large
knowledge base vectors)."""

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
from rag_pipeline.retrieval.dense_index import DenseIndex


def measure(engine: sa.Engine, knowledge_base: str, model: str) -> dict:
    with engine.connect() as conn:
        kb_id = conn.execute(sa.text("SELECT id FROM knowledge_bases WHERE name = :n"),
                             {"n": knowledge_base}).scalar_one()
        estimate = memory_budget.vector_index_bytes(conn, kb_id, model)
        tracemalloc.start()
        t = time.perf_counter()
        index = DenseIndex.load(conn, kb_id, model)
        seconds = time.perf_counter() - t
        kept, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    components = max(index.vectors.size, 1)
    return {"vectors": len(index.vectors), "dimension": index.vectors.shape[1], "load_s": seconds,
            "peak_mib": peak / 2**20, "peak_bytes_per_component": peak / components, "kept_mib": kept / 2**20,
            "kept_bytes_per_component": kept / components, "estimate_mib": estimate / 2**20,
            "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--knowledge-base", required=True)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args(argv)
    from rag_pipeline.storage.engine import get_engine

    r = measure(get_engine(), args.knowledge_base, args.model)
    print(f"{args.knowledge_base}: {r['vectors']:,} vectors x {r['dimension']}: load {r['load_s']:.1f} s "
          f"(tracemalloc on), peak {r['peak_mib']:,.1f} MiB ({r['peak_bytes_per_component']:.2f} B/component), "
          f"kept {r['kept_mib']:,.1f} MiB ({r['kept_bytes_per_component']:.2f} B/component), budget estimate "
          f"{r['estimate_mib']:,.1f} MiB, process peak RSS {r['max_rss_mib']:,.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
