"""Smoke-run bench/eval_bench.py at a tiny scale (500 chunks x 50 cases) on the session's database.

Checks that the whole harness runs (synthetic KB + dataset, seed-style baseline, pipeline, pool
comparison, HNSW recall + EXPLAIN, ingestion vs raw encode) and that its machine-readable last line has
four finite positive numbers. No performance assertion: CI machines are shared and small.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "eval_bench.py"
LAST_LINE = re.compile(
    r"speedup_vs_seed=(?P<speedup>\S+) eval_over_embed=(?P<ratio>\S+) "
    r"persist_rows_per_s=(?P<rows>\S+) peak_rss_mb=(?P<rss>\S+)"
)


def test_eval_bench_smoke(engine) -> None:  # noqa: ARG001 - the session database is started and migrated
    # RAG_PGDATA / RAG_DATABASE_URL of the test session are inherited (set by conftest).
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--chunks", "500", "--cases", "50", "--recall-queries", "10",
         "--ingest-texts", "10", "--dagster-cases", "0"],
        capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("SYNTHETIC benchmark")
    assert any(line.startswith("machine: ") for line in lines)
    # baseline and pipeline store the same pools (a question embedded alone vs in a batch may differ
    # by ~1e-7, which could swap two near-tied vector scores: allow one or two such cases)
    same = re.search(r"pools: (\d+)/50 cases identical", proc.stdout)
    assert same and int(same[1]) >= 48, proc.stdout
    # at 500 chunks the planner may prefer a scan; the leg's expression must still match the HNSW index
    assert any("(index usable by the vector leg: True)" in line for line in lines), proc.stdout
    match = LAST_LINE.fullmatch(lines[-1])
    assert match, proc.stdout
    values = {name: float(match[name]) for name in ("speedup", "ratio", "rows", "rss")}
    assert all(math.isfinite(v) and v > 0 for v in values.values()), values
