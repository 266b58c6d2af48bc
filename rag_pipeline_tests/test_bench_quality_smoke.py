"""Smoke test of ``bench/quality_beir.py``: a tiny SciFact subset, every shipped strategy, exit 0, sane report."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rag_pipeline.retrieval.strategies import load_registry

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "benchmarks" / "scifact"


@pytest.mark.slow
def test_quality_bench_runs_on_a_subset(engine, tmp_path):
    # CI and every developer machine have ../shared beside the clone: missing data is a failure, not a skip
    assert (SCIFACT / "corpus.jsonl").exists(), f"no BEIR SciFact data at {SCIFACT} (expected ../shared beside the repo)"
    env = {**os.environ, "RAG_DATABASE_URL": engine.url.render_as_string(hide_password=False),
           "PYTHONPATH": str(ROOT)}
    report = tmp_path / "report.md"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "quality_beir.py"), "--folder", str(SCIFACT),
         "--limit-queries", "20", "--max-docs", "100", "--markdown", str(report)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert report.read_text(encoding="utf-8") == out
    assert "SUBSET" in out and "20 queries" in out and "Machine:" in out
    for version in load_registry():
        row = re.search(rf"^\| {re.escape(version)} \|(.*)$", out, re.MULTILINE)
        assert row, f"no row for {version}"
        cells = [c.strip() for c in row.group(1).split("|")]
        ndcg, recall, mrr, p10 = map(float, cells[4:8])
        assert 0.0 <= p10 <= 1.0 and 0.0 < ndcg <= 1.0 and 0.0 < recall <= 1.0 and 0.0 < mrr <= 1.0
    assert "equal pytrec_eval" in out or "not cross-checked" in out
    hnsw = re.findall(r"^\| (use-multilingual-v3|all-minilm-l6-v2) \| \d+ \| (yes|no \(exact sort\)) \| ([\d.]+) \| "
                      r"([\d.]+) \|$", out, re.MULTILINE)
    assert len(hnsw) == 2 and all(float(r10) >= 0.9 for _, _, r10, _ in hnsw)
