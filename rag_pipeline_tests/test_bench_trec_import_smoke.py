"""Smoke-run bench/trec_import_bench.py at a tiny size on the session's database: it imports every line, its mean
nDCG equals trec_eval's (pytrec_eval, ``-c``: every topic counted) on the files its own generator writes, and it
leaves no knowledge base, dataset or run behind. No performance target (CI machines are shared and small)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytrec_eval
import sqlalchemy as sa

BENCH = Path(__file__).resolve().parents[1] / "bench" / "trec_import_bench.py"
LINES, TOPICS = 3000, 30
STORED = re.compile(r"stored: (?P<stored>[\d,]+) candidates, (?P<cases>\d+) cases, ndcg_at_k=(?P<ndcg>[\d.]+)")


def _trec_eval_ndcg(tmp_path: Path) -> float:
    sys.path.insert(0, str(BENCH.parent))
    try:
        from trec_import_bench import write_files  # the bench's own generator
    finally:
        sys.path.remove(str(BENCH.parent))
    qrels_file, _, run_file = write_files(tmp_path, LINES, TOPICS, False, 0)
    qrels: dict[str, dict[str, int]] = {}
    for line in qrels_file.read_text().splitlines():
        q, _, d, g = line.split()
        qrels.setdefault(q, {})[d] = int(g)
    run: dict[str, dict[str, float]] = {}
    for line in run_file.read_text().splitlines():
        q, _, d, _, s, _ = line.split()
        run.setdefault(q, {})[d] = float(s)
    per_topic = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    return float(np.mean([per_topic.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels]))


def test_trec_import_bench_smoke(engine, tmp_path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--lines", str(LINES), "--topics", str(TOPICS)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    stored = next((m for m in map(STORED.fullmatch, proc.stdout.splitlines()) if m), None)
    assert stored, proc.stdout
    assert (int(stored["stored"].replace(",", "")), int(stored["cases"])) == (LINES, TOPICS)
    assert abs(float(stored["ndcg"]) - _trec_eval_ndcg(tmp_path)) <= 5e-5  # printed to 4 decimals
    assert re.search(r"import_s=[\d.]+ lines_per_s=[\d,]+ peak_rss_before_mb=\d+ peak_rss_after_mb=\d+", proc.stdout)
    with engine.connect() as conn:
        left = conn.execute(sa.text(
            "SELECT (SELECT count(*) FROM knowledge_bases WHERE name LIKE 'bench-trec-%') + "
            "(SELECT count(*) FROM retrieval_evaluation_datasets WHERE knowledge_base_name LIKE 'bench-trec-%')"
        )).scalar_one()
    assert left == 0
