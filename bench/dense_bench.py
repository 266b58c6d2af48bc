"""The exact vector leg in memory (``retrieval/dense_index.py``) against the SQL exact statement, on a BEIR KB.

For each model and each k: every question of the split searched by ``hybrid_search_batch`` of a vector-only
``vector_search: exact`` strategy, once through SQL (``VECTOR_LEG_EXACT_SQL``) and once with the KB's vectors in
memory, with the same question vectors. Prints per (model, k):

- equality: the cases whose candidate lists differ (ids or order), and how many of those are explained by a
  float tie (at every position the two lists' scores agree within ``--tolerance``: the swapped chunks score the
  same up to float32 rounding), the largest score difference of a chunk in both lists, and the exact ties
  (two equal scores) inside the SQL lists, which both legs resolve by chunk id;
- time: the SQL leg vs the memory leg, for one question at a time (mean over ``--single`` questions) and for every
  question in batches of ``--batch-size`` (the evaluation's batches), the HNSW leg of the same k next to them,
  and the index load (once per run);
- the loads of one click of every registry strategy in one process, shared (``evaluation.shared_indexes``: one per
  model or (k1, b)) vs one per run (``--skip-legs``: only these).

The KB must exist (``bench/quality_beir.py`` or ``rag-pipeline import-beir`` makes it, with both models).
Usage: python bench/dense_bench.py [--kb beir-scifact] [--folder ../shared/benchmarks/scifact] [--k 10,100]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchutil import machine_line  # noqa: E402

from rag_pipeline.knowledge_base import chunking  # noqa: E402
from rag_pipeline.knowledge_base.beir import read_beir  # noqa: E402
from rag_pipeline.knowledge_base.embedding import get_embedder  # noqa: E402
from rag_pipeline.retrieval.bm25_index import Bm25Index  # noqa: E402
from rag_pipeline.retrieval.dense_index import DenseIndex  # noqa: E402
from rag_pipeline.retrieval.search import hybrid_search_batch  # noqa: E402
from rag_pipeline.retrieval.strategies import Strategy, load_registry  # noqa: E402
from rag_pipeline.settings import get_settings  # noqa: E402
from rag_pipeline.storage.engine import get_engine  # noqa: E402

MODELS = ("use-multilingual-v3", "all-minilm-l6-v2")


def strategy(model: str, k: int, mode: str) -> Strategy:
    return Strategy(version=f"bench-dense-{mode}-{k}", embedding_model=model, vector_candidate_k=k,
                    keyword_candidate_k=0, vector_weight=1.0, keyword_weight=0.0, final_top_k=k,
                    ef_search=max(100, k) if mode == "hnsw" else 100, vector_search=mode)


def search(engine, kb_id, questions, vectors, s: Strategy, batch: int, index=None) -> tuple[float, list]:
    traces, start = [], time.perf_counter()
    for at in range(0, len(questions), batch):
        with engine.begin() as conn:
            traces += hybrid_search_batch(conn, knowledge_base_id=kb_id, queries=questions[at:at + batch],
                                          strategy=s, query_vectors=vectors[at:at + batch], vector_index=index)
    return time.perf_counter() - start, traces


def compare(sql, mem, tolerance: float) -> dict:
    differ = explained = ties = 0
    max_diff = 0.0
    for a, b in zip(sql, mem, strict=True):
        ids_a, ids_b = [c.chunk_id for c in a.candidates], [c.chunk_id for c in b.candidates]
        sa_, sb = np.array([c.vector_score for c in a.candidates]), np.array([c.vector_score for c in b.candidates])
        ties += int((np.diff(sa_) == 0).sum())
        common = dict(zip(ids_a, sa_, strict=True))
        diffs = [abs(common[c] - s) for c, s in zip(ids_b, sb, strict=True) if c in common]
        max_diff = max(max_diff, max(diffs, default=0.0))
        if ids_a != ids_b:
            differ += 1
            explained += len(sa_) == len(sb) and bool(np.abs(sa_ - sb).max(initial=0.0) <= tolerance)
    return {"differ": differ, "explained": explained, "max_score_diff": max_diff, "exact_ties": ties}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench_data = get_settings().bench_data or ROOT.parent / "shared" / "benchmarks"
    ap.add_argument("--folder", default=str(bench_data / "scifact"))
    ap.add_argument("--kb", default="beir-scifact")
    ap.add_argument("--split", default="test")
    ap.add_argument("--k", default="10,100")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--single", type=int, default=20, help="questions searched one at a time for the latency")
    ap.add_argument("--tolerance", type=float, default=1e-6)
    ap.add_argument("--skip-legs", action="store_true", help="only the index loads of one click (below)")
    args = ap.parse_args(argv)

    _, texts, qrels = read_beir(args.folder, args.split)
    questions = [texts[q] for q in qrels if q in texts]
    kb_id = chunking.knowledge_base_id(args.kb)
    engine = get_engine()
    print(f"{args.kb}: {len(questions)} questions; {machine_line()}")
    print("| model | k | differing cases | explained by a float tie | max score diff | exact ties | "
          "SQL exact, 1 q (ms) | memory, 1 q (ms) | ratio | SQL exact, all (s) | memory, all (s) | ratio | "
          "HNSW, all (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    loads = []
    for model in [] if args.skip_legs else args.models.split(","):
        vectors = get_embedder(model).embed(questions)
        start = time.perf_counter()
        with engine.connect() as conn:
            index = DenseIndex.load(conn, kb_id, model)
        loads.append(f"{model}: {len(index.chunk_ids)} vectors × {index.vectors.shape[1]} loaded in "
                     f"{time.perf_counter() - start:.3f} s ({index.vectors.nbytes / 2**20:.1f} MiB float32)")
        for k in map(int, args.k.split(",")):
            exact, n1 = strategy(model, k, "exact"), min(args.single, len(questions))
            sql_1, _ = search(engine, kb_id, questions[:n1], vectors, exact, 1)
            mem_1, _ = search(engine, kb_id, questions[:n1], vectors, exact, 1, index)
            sql_all, sql = search(engine, kb_id, questions, vectors, exact, args.batch_size)
            mem_all, mem = search(engine, kb_id, questions, vectors, exact, args.batch_size, index)
            hnsw_all, _ = search(engine, kb_id, questions, vectors, strategy(model, k, "hnsw"), args.batch_size)
            c = compare(sql, mem, args.tolerance)
            print(f"| {model} | {k} | {c['differ']} | {c['explained']} | {c['max_score_diff']:.1e} | "
                  f"{c['exact_ties']} | {1000 * sql_1 / n1:.1f} | {1000 * mem_1 / n1:.1f} | {sql_1 / mem_1:.1f} | "
                  f"{sql_all:.2f} | {mem_all:.2f} | {sql_all / mem_all:.1f} | {hnsw_all:.2f} |", flush=True)
    print("\n".join(["", *loads, *click_loads(engine, kb_id), machine_line()]))
    return 0


def click_loads(engine, kb_id) -> list[str]:
    """One click of every registry strategy in one process: the in-memory indexes it loads with
    ``evaluation.shared_indexes`` (one per KB version and model or (k1, b)) and without (one per run), timed."""
    needs: dict[tuple, int] = {}
    for s in load_registry().values():
        if s.keyword_candidate_k and s.keyword_scorer == "bm25":
            key = ("bm25", s.bm25_k1, s.bm25_b)
            needs[key] = needs.get(key, 0) + 1
        if s.vector_candidate_k and s.vector_search == "exact":
            needs[("vectors", s.embedding_model)] = needs.get(("vectors", s.embedding_model), 0) + 1
    lines, shared_s, unshared_s = [], 0.0, 0.0
    for key, runs in needs.items():
        start = time.perf_counter()
        with engine.connect() as conn:
            if key[0] == "bm25":
                Bm25Index.load(conn, kb_id, key[1], key[2])
            else:
                DenseIndex.load(conn, kb_id, key[1])
        seconds = time.perf_counter() - start
        shared_s, unshared_s = shared_s + seconds, unshared_s + runs * seconds
        lines.append(f"click load {key}: {seconds:.3f} s, needed by {runs} run(s)")
    lines.append(f"a click of the {len(load_registry())} registry strategies loads {len(needs)} indexes shared "
                 f"({shared_s:.2f} s) instead of {sum(needs.values())} ({unshared_s:.2f} s)")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
