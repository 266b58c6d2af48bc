"""Smoke test of ``bench/mixed_language.py`` on its bilingual corpus at chunk size 150: exit 0, a report per
strategy, and the two changes visible in its figures — no heading-only chunk after, fewer other-language chunks
in the keyword pools with the ``mixed`` text mode, and BM25 at least as good as with ``chinese``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # ingests four knowledge bases with USE embeddings and runs six strategies on each
def test_mixed_language_bench_on_the_bilingual_corpus(engine, tmp_path):
    env = {**os.environ, "RAG_DATABASE_URL": engine.url.render_as_string(hide_password=False),
           "PYTHONPATH": str(ROOT)}
    figures = tmp_path / "figures.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "mixed_language.py"), "--corpora", "mixed",
                           "--sizes", "150", "--json", str(figures)], capture_output=True, text=True, env=env,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("machine: ") and "| bm25-v1 |" in proc.stdout
    runs = json.loads(figures.read_text(encoding="utf-8"))["mixed"]["150"]
    assert set(runs) == {"before", "+mode", "+headings", "after"}
    assert runs["before"]["heading_only"] > 0 and runs["after"]["heading_only"] == 0
    assert runs["+mode"]["heading_only"] == runs["before"]["heading_only"], "the text mode does not change chunks"
    assert runs["after"]["cases"] == runs["before"]["cases"] == 20
    before, after = runs["before"]["strategies"], runs["after"]["strategies"]
    for keyword in ("bm25-v1", "keyword-v1"):
        assert after[keyword]["xlang"] < before[keyword]["xlang"], keyword
    assert runs["+mode"]["strategies"]["bm25-v1"]["ndcg"] >= before["bm25-v1"]["ndcg"]
    assert after["vector-v1"]["ndcg"] >= before["vector-v1"]["ndcg"], "a heading alone is a poor vector match too"
    for run in runs.values():
        for metrics in run["strategies"].values():
            assert all(0.0 <= metrics[m] <= 1.0 for m in ("ndcg", "recall", "mrr")), metrics
