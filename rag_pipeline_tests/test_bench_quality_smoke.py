"""Smoke test of ``bench/quality_beir.py``: a tiny SciFact subset, every shipped strategy, exit 0, sane report —
and its numbers re-checked from outside: each strategy evaluated by the pipeline on the same cases stores the
same nDCG@10, MRR@10 and P@10 (within 1e-9), and pytrec_eval (trec_eval) on the stored pools gives the bench's
nDCG@10, P@10 and Recall@100 (within 1e-9).

Needs the benchmark data (``RAG_BENCH_DATA``, see the ``bench_data`` fixture): skipped when it is unset.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from rag_pipeline.evaluation.datasets.load import EvaluationCase, load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.knowledge_base.beir import read_beir
from rag_pipeline.retrieval.strategies import load_registry

ROOT = Path(__file__).resolve().parents[1]
QUERIES, MAX_DOCS = 20, 100
# what bench/quality_beir.py prints when every strategy's metrics equal pytrec_eval's (it exits 1 otherwise)
CROSS_CHECKED = "Metrics check: nDCG@10, Recall@100 and P@10 equal pytrec_eval's (trec_eval) within 1e-9."


# bench_data first: skip before the server starts
@pytest.mark.slow  # ingests a SciFact subset, evaluates every shipped strategy
def test_quality_bench_runs_on_a_subset(bench_data, engine, tmp_path):
    import pytrec_eval  # a dev dependency: without it the bench does not cross-check (fail here)

    scifact = bench_data / "scifact"
    env = {**os.environ, "RAG_DATABASE_URL": engine.url.render_as_string(hide_password=False),
           "PYTHONPATH": str(ROOT)}
    report, numbers = tmp_path / "report.md", tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "quality_beir.py"), "--folder", str(scifact),
         "--limit-queries", str(QUERIES), "--max-docs", str(MAX_DOCS), "--markdown", str(report),
         "--json", str(numbers)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert report.read_text(encoding="utf-8") == out
    assert "SUBSET" in out and f"{QUERIES} queries" in out and "Machine:" in out
    assert CROSS_CHECKED in out, "the metrics were not cross-checked with pytrec_eval"

    # The best P@10 any ranking can reach on this subset: every query's judged documents in its top 10.
    _, _, qrels = read_beir(scifact, max_docs=MAX_DOCS, max_queries=QUERIES)
    assert len(qrels) == QUERIES
    best_p10 = sum(min(len(rel), 10) for rel in qrels.values()) / (10 * len(qrels))
    # ~120 documents, ~1 judged per query: a random ranking scores nDCG@10 ~0.05; the shipped strategies
    # measured 0.76-0.97 nDCG@10, 0.72-0.96 MRR@10, 0.90-1.0 Recall@100 (2-core CI machine, SciFact subset)
    for version in load_registry():
        row = re.search(rf"^\| {re.escape(version)} \|(.*)$", out, re.MULTILINE)
        assert row, f"no row for {version}"
        cells = [c.strip() for c in row.group(1).split("|")]
        ndcg, recall, mrr, p10 = map(float, cells[4:8])
        assert 0.6 <= ndcg <= 1.0, f"{version}: nDCG@10 {ndcg}"
        assert 0.6 <= mrr <= 1.0, f"{version}: MRR@10 {mrr}"
        assert 0.8 <= recall <= 1.0, f"{version}: Recall@100 {recall}"
        assert 0.5 * best_p10 <= p10 <= best_p10 + 1e-9, f"{version}: P@10 {p10}, at most {best_p10:.4f}"
    hnsw = re.findall(r"^\| (use-multilingual-v3|all-minilm-l6-v2) \| \d+ \| (yes|no \(exact sort\)) \| ([\d.]+) \| "
                      r"([\d.]+) \|$", out, re.MULTILINE)
    assert len(hnsw) == 2 and all(float(r10) >= 0.9 for _, _, r10, _ in hnsw)

    # The bench's numbers, from outside the bench: the pipeline's stored runs on the same cases, and trec_eval.
    bench = json.loads(numbers.read_text(encoding="utf-8"))
    relevance = {c["case_id"]: EvaluationCase.from_dict(c).relevance for c in bench["cases"]}
    assert [len(r) for r in relevance.values()] == [sum(g >= 1 for g in rel.values()) for rel in qrels.values()]
    assert {c["k"] for c in bench["cases"]} == {10}
    dataset_file = tmp_path / "subset.json"
    dataset_file.write_text(json.dumps({"knowledge_base": bench["knowledge_base"], "cases": bench["cases"]}))
    dataset = load_dataset(dataset_file)
    qrels_by_case = {case: {str(i): int(g) for i, g in rel.items()} for case, rel in relevance.items()}
    trec = pytrec_eval.RelevanceEvaluator(qrels_by_case, {"ndcg_cut_10", "recall_100", "P_10"})
    for version, strategy in load_registry().items():
        ours = bench["results"][version]
        outcome = evaluate_dataset(engine, dataset, strategy)
        with engine.connect() as conn:
            run = conn.execute(sa.text("SELECT ndcg_at_k, reciprocal_rank, precision_at_k, case_count FROM "
                                       "retrieval_evaluation_runs WHERE id = :r"), {"r": outcome.run_id}).one()
            pools: dict[str, dict[str, float]] = {}
            for row in conn.execute(sa.text("SELECT case_id, chunk_id::text, rank FROM retrieval_evaluation_candidates "
                                            "WHERE evaluation_run_id = :r"), {"r": outcome.run_id}):
                pools.setdefault(row.case_id, {})[row.chunk_id] = 1.0 / row.rank  # trec_eval sorts by score
        assert run.case_count == QUERIES
        assert abs(run.ndcg_at_k - ours["ndcg@10"]) <= 1e-9, version
        assert abs(run.reciprocal_rank - ours["mrr@10"]) <= 1e-9, version
        assert abs(run.precision_at_k - ours["p@10"]) <= 1e-9, version
        per_case = trec.evaluate(pools)
        for key, measure in (("ndcg@10", "ndcg_cut_10"), ("recall@100", "recall_100"), ("p@10", "P_10")):
            theirs = sum(per_case.get(case, {}).get(measure, 0.0) for case in qrels_by_case) / len(qrels_by_case)
            assert abs(theirs - ours[key]) <= 1e-9, (version, key, theirs, ours[key])
