"""Retrieval quality of every shipped strategy on a BEIR dataset (default: SciFact, 5,183 docs, 300 queries).

1. Imports the BEIR folder into a knowledge base with :func:`rag_pipeline.knowledge_base.beir.import_beir`: one chunk
   per document (title + blank line + text), ``text_search="english"``, both embedders (USE and MiniLM).
   Re-running is cheap: unchanged documents are skipped. A subset (``--limit-queries`` / ``--max-docs``:
   the first N judged queries, every document they judge, the first M others) goes to its own KB.
2. For each strategy of the registry: :func:`hybrid_search_batch` over all queries (query embedding
   included in the time; a ``vector_search: exact`` leg in memory, as in an evaluation, its vectors loaded once
   per model in the first such strategy's time), then nDCG@10, Recall@100, MRR@10 and P@10 over the whole candidate pool
   (:func:`rag_pipeline.evaluation.metrics.evaluate_many`, cross-checked with ``pytrec_eval`` when installed).
   Strategies whose pool is smaller than 100 report Recall@100 of their pool.
3. HNSW recall: per embedder, the vector leg's top-10 / top-100 through the index (the strategies'
   ``ef_search``, iterative scan) against exact search (the leg's exact fallback statement).

Prints a markdown report (``--markdown PATH`` also writes it; ``--json PATH`` writes the knowledge base, the
cases and the unrounded metrics). ``--check-targets`` exits 1 unless
bm25-v1 nDCG@10 >= 0.67, the best strategy >= 0.72 and the best hybrid >= the best single leg.

Usage: python bench/quality_beir.py [--folder $RAG_BENCH_DATA/scifact] [--limit-queries N] [--max-docs N]
(``--folder`` defaults to ``$RAG_BENCH_DATA/scifact``, else ``../shared/benchmarks/scifact`` beside the repo.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rag_pipeline.evaluation.datasets.load import EvaluationCase  # noqa: E402
from rag_pipeline.evaluation.metrics import evaluate_many  # noqa: E402
from rag_pipeline.knowledge_base import chunking  # noqa: E402
from rag_pipeline.knowledge_base.beir import import_beir  # noqa: E402
from rag_pipeline.knowledge_base.embedding import get_embedder  # noqa: E402
from rag_pipeline.retrieval import sql as retrieval_sql  # noqa: E402
from rag_pipeline.retrieval.dense_index import DenseIndex  # noqa: E402
from rag_pipeline.retrieval.search import hybrid_search_batch  # noqa: E402
from rag_pipeline.retrieval.strategies import load_registry  # noqa: E402
from rag_pipeline.settings import get_settings  # noqa: E402
from rag_pipeline.storage.engine import get_engine  # noqa: E402

MODELS = ("use-multilingual-v3", "all-minilm-l6-v2")
REFERENCES = [  # published, title + text, trec_eval (see ../shared/benchmarks/scifact/README.md)
    ("BM25 (Anserini, flat)", 0.679, 0.925),
    ("BM25 (Anserini, multifield) / BEIR paper", 0.665, 0.908),
    ("bge-small-en-v1.5 (MTEB)", 0.713, 0.945),
    ("bge-base-en-v1.5 (Anserini)", 0.741, 0.967),
]


def machine(engine) -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    mem = next((int(line.split()[1]) / 2**20 for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), 0.0) if Path("/proc/meminfo").exists() else 0.0
    with engine.connect() as conn:
        pg = conn.execute(sa.text("SHOW server_version")).scalar()
        vec = conn.execute(sa.text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).scalar()
    return (f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM; {platform.system()} {platform.release()}; "
            f"Python {platform.python_version()}; PostgreSQL {pg} + pgvector {vec}")


def evaluate(retrieved: list[list[str]], relevant: list[dict[str, int]]) -> dict[str, float]:
    at10 = evaluate_many(retrieved, relevant, 10)
    at100 = evaluate_many(retrieved, relevant, 100)
    return {"ndcg@10": float(at10["ndcg_at_k"].mean()), "recall@100": float(at100["recall_at_k"].mean()),
            "mrr@10": float(at10["reciprocal_rank"].mean()), "p@10": float(at10["precision_at_k"].mean())}


def pytrec_check(retrieved, relevant, ours: dict[str, float]) -> str:
    """Same numbers from trec_eval (pytrec_eval), scores 1/rank so it keeps our order."""
    try:
        import pytrec_eval  # dev dependency
    except ImportError:
        return "pytrec_eval not installed: not cross-checked"
    qrels = {str(i): {doc: int(grade) for doc, grade in rel.items()} for i, rel in enumerate(relevant)}
    run = {str(i): {doc: 1.0 / r for r, doc in enumerate(ids, start=1)} for i, ids in enumerate(retrieved)}
    res = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "recall_100", "P_10"}).evaluate(run)
    theirs = {key: float(np.mean([res.get(q, {}).get(m, 0.0) for q in qrels])) for key, m in
              (("ndcg@10", "ndcg_cut_10"), ("recall@100", "recall_100"), ("p@10", "P_10"))}
    bad = {k: (ours[k], v) for k, v in theirs.items() if abs(ours[k] - v) > 1e-9}
    if bad:
        raise SystemExit(f"metrics disagree with pytrec_eval: {bad}")
    return "nDCG@10, Recall@100 and P@10 equal pytrec_eval's (trec_eval) within 1e-9"


def hnsw_recall(engine, kb_id, questions, strategies) -> list[tuple[str, int, bool, float, float]]:
    """Per model: mean overlap of the vector leg's top-10 / top-100 with exact search, at the strategies'
    ef_search, and whether the planner chose the HNSW index (it rightly prefers an exact sort for small KBs)."""
    rows = []
    for model in MODELS:
        users = [s for s in strategies if s.embedding_model == model and s.vector_candidate_k > 0]
        if not users:
            continue
        ef = max(s.ef_search for s in users)
        vectors = list(get_embedder(model).embed(questions))
        tops = {}
        with engine.begin() as conn:
            dim = conn.execute(sa.text(retrieval_sql.MODEL_DIMENSION_SQL), {"model": model}).scalar()
            params = {"kb": kb_id, "model": model, "k": 100, "query_vectors": vectors}
            for mode in ("index", "exact"):
                conn.execute(sa.text(retrieval_sql.VECTOR_SETTINGS_SQL), {"ef_search": ef})
                sql = sa.text(retrieval_sql.vector_leg_sql(dim, exact=mode == "exact"))  # exact: the leg's fallback
                plan = " ".join(r[0] for r in conn.execute(sa.text("EXPLAIN " + sql.text), params))
                if mode == "exact":
                    assert "hnsw" not in plan, plan
                else:
                    uses_index = "hnsw" in plan
                got: dict[int, list[tuple[float, str]]] = {}
                for r in conn.execute(sql, params):
                    got.setdefault(r.query_index, []).append((-r.score, str(r.chunk_id)))
                tops[mode] = {q: [c for _, c in sorted(v)] for q, v in got.items()}
        rec = {k: np.mean([len(set(tops["index"].get(q, [])[:k]) & set(ex[:k])) / len(ex[:k])
                           for q, ex in tops["exact"].items()]) for k in (10, 100)}
        rows.append((model, ef, uses_index, float(rec[10]), float(rec[100])))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench_data = get_settings().bench_data or ROOT.parent / "shared" / "benchmarks"
    ap.add_argument("--folder", default=str(bench_data / "scifact"),
                    help="BEIR folder (default $RAG_BENCH_DATA/scifact, else ../shared/benchmarks/scifact)")
    ap.add_argument("--kb", help="knowledge base name (default beir-<folder name>[-q<N>-d<M>])")
    ap.add_argument("--split", default="test")
    ap.add_argument("--limit-queries", type=int)
    ap.add_argument("--max-docs", type=int)
    ap.add_argument("--strategies", help="comma-separated versions (default: every registry version)")
    ap.add_argument("--batch-size", type=int, default=100, help="questions per hybrid_search_batch call")
    ap.add_argument("--no-hnsw-recall", action="store_true")
    ap.add_argument("--markdown", type=Path, help="also write the report to this file")
    ap.add_argument("--json", type=Path, help="also write the knowledge base, the cases and the unrounded metrics "
                                              "per strategy as JSON (the smoke test re-checks them)")
    ap.add_argument("--check-targets", action="store_true")
    args = ap.parse_args(argv)

    folder = Path(args.folder)
    subset = args.limit_queries is not None or args.max_docs is not None
    kb_name = args.kb or f"beir-{folder.name}" + (f"-q{args.limit_queries}-d{args.max_docs}" if subset else "")
    registry = load_registry()
    versions = args.strategies.split(",") if args.strategies else list(registry)
    strategies = [registry[v] for v in versions]
    engine = get_engine()

    t0 = time.perf_counter()
    ingest, dataset = import_beir(engine, folder, kb_name, split=args.split, models=MODELS,
                                  max_docs=args.max_docs, max_queries=args.limit_queries)
    ingest_s = time.perf_counter() - t0
    kb_id = chunking.knowledge_base_id(kb_name)
    questions = [c["question"] for c in dataset["cases"]]
    relevant = [EvaluationCase.from_dict(c).relevance for c in dataset["cases"]]  # {id: grade >= 1}
    with engine.connect() as conn:
        n_chunks = conn.execute(sa.text("SELECT chunk_count FROM knowledge_bases WHERE id = :kb"),
                                {"kb": kb_id}).scalar()
    print(f"knowledge base {kb_name}: {n_chunks} chunks, {len(questions)} queries "
          f"(import {ingest_s:.1f} s, {ingest.documents_new} new documents)", file=sys.stderr)

    for model in {s.embedding_model for s in strategies if s.vector_candidate_k}:
        get_embedder(model).embed(["warm-up"])  # load the model outside the timings
    results, check, indexes = {}, "", {}
    for strategy in strategies:
        t = time.perf_counter()
        traces = []
        with engine.connect() as conn:
            index = None  # vector_search: exact runs in memory, as in an evaluation (loaded once per model)
            if strategy.vector_search == "exact" and strategy.vector_candidate_k:
                model = strategy.embedding_model
                index = indexes[model] = indexes.get(model) or DenseIndex.load(conn, kb_id, model)
            for start in range(0, len(questions), args.batch_size):
                traces += hybrid_search_batch(conn, knowledge_base_id=kb_id, strategy=strategy,
                                              queries=questions[start:start + args.batch_size], vector_index=index)
        elapsed = time.perf_counter() - t
        retrieved = [[c.chunk_id for c in tr.candidates] for tr in traces]
        scores = evaluate(retrieved, relevant)
        check = pytrec_check(retrieved, relevant, scores)
        pool = float(np.mean([len(r) for r in retrieved]))
        results[strategy.version] = {**scores, "seconds": elapsed, "pool": pool}
        print(f"{strategy.version}: nDCG@10 {scores['ndcg@10']:.4f} ({elapsed:.1f} s)", file=sys.stderr)

    lines = [f"Dataset `{folder.name}` ({args.split}): {n_chunks} documents (one chunk each), {len(questions)} queries"
             + (" — SUBSET" if subset else "") + ".", "",
             f"Machine: {machine(engine)}.", "",
             "| strategy | model | keyword | fusion | pool | nDCG@10 | Recall@100 | MRR@10 | P@10 | time (s) "
             "| ms/query |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for s in strategies:
        r = results[s.version]
        model = s.embedding_model if s.vector_candidate_k else "—"
        keyword = (f"{s.keyword_scorer}" + (f" k1={s.bm25_k1:g} b={s.bm25_b:g}" if s.keyword_scorer == "bm25" else "")
                   if s.keyword_candidate_k else "—")
        fusion = (f"rrf k={s.rrf_k}" if s.fusion == "rrf" else
                  f"{s.vector_weight:g}/{s.keyword_weight:g} {s.normalization}")
        fusion += " +complete" if s.complete_pool else ""
        if s.rerank is not None:
            fusion += (f" → rerank {s.rerank.method} {s.rerank.model} {s.rerank.weight:g} {s.rerank.normalization}"
                       + (f" top {s.rerank.top_n}" if s.rerank.top_n else ""))
        lines.append(f"| {s.version} | {model} | {keyword} | {fusion} | {r['pool']:.0f} | {r['ndcg@10']:.4f} | "
                     f"{r['recall@100']:.4f} | {r['mrr@10']:.4f} | {r['p@10']:.4f} | {r['seconds']:.1f} | "
                     f"{1000 * r['seconds'] / max(len(questions), 1):.1f} |")
    lines += ["", "Published references (same task, trec_eval):", "", "| system | nDCG@10 | Recall@100 |",
              "|---|---:|---:|"] + [f"| {n} | {a:.3f} | {b:.3f} |" for n, a, b in REFERENCES]
    lines += ["", f"Metrics check: {check}."]
    if not args.no_hnsw_recall:
        lines += ["", "HNSW vs exact search (same filters; mean overlap of the top-k sets):", "",
                  "| model | ef_search | HNSW index in plan | recall@10 | recall@100 |", "|---|---:|---|---:|---:|"]
        lines += [f"| {m} | {ef} | {'yes' if used else 'no (exact sort)'} | {r10:.4f} | {r100:.4f} |"
                  for m, ef, used, r10, r100 in hnsw_recall(engine, kb_id, questions, strategies)]
    ok = _targets(results, strategies, lines)
    report = "\n".join(lines) + "\n"
    print(report, end="")
    if args.markdown:
        args.markdown.write_text(report, encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps({"knowledge_base": kb_name, "cases": dataset["cases"], "results": results},
                                        indent=1), encoding="utf-8")
    return 1 if args.check_targets and not ok else 0


def _targets(results: dict, strategies, lines: list[str]) -> bool:
    ndcg = {v: r["ndcg@10"] for v, r in results.items()}
    checks = []
    if "bm25-v1" in ndcg:
        checks.append(("bm25-v1 nDCG@10 >= 0.67", ndcg["bm25-v1"] >= 0.67))
    checks.append((f"best strategy >= 0.72 ({max(ndcg, key=ndcg.get)} {max(ndcg.values()):.4f})",
                   max(ndcg.values()) >= 0.72))
    hybrid = {s.version: s.vector_candidate_k > 0 and s.keyword_candidate_k > 0 for s in strategies}
    hybrids = {v: x for v, x in ndcg.items() if hybrid[v]}
    singles = {v: x for v, x in ndcg.items() if not hybrid[v]}
    if hybrids and singles:
        checks.append((f"best hybrid {max(hybrids.values()):.4f} >= best single leg {max(singles.values()):.4f}",
                       max(hybrids.values()) >= max(singles.values())))
    lines += ["", "Targets:", ""] + [f"- [{'x' if ok else ' '}] {name}" for name, ok in checks]
    return all(ok for _, ok in checks)


if __name__ == "__main__":
    raise SystemExit(main())
