"""Smoke-run bench/eval_bench.py at a tiny scale (500 chunks x 50 cases) on the session's database.

Checks that the whole harness runs (synthetic KB + dataset, seed-style baseline, pipeline, pool
comparison, HNSW recall + EXPLAIN, ingestion vs raw encode), that the inputs of its ratios are the pipeline's
stored results (the run row, its candidate and case rows, its averages) and that the ratios are recomputed from
them and lie in sane bounds (wide: CI machines are shared and small, so no performance target).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from rag_pipeline.evaluation.metrics import METRIC_NAMES

BENCH = Path(__file__).resolve().parents[1] / "bench" / "eval_bench.py"
LAST_LINE = re.compile(
    r"speedup_vs_seed=(?P<speedup>\S+) sql_share=(?P<share>\S+) keyword_ms_per_q=(?P<keyword>\S+) "
    r"eval_over_embed=(?P<ratio>\S+) persist_rows_per_s=(?P<rows>\S+) peak_rss_mb=(?P<rss>\S+) load1=\S+"
)


@pytest.mark.slow  # the whole eval bench in a subprocess
def test_eval_bench_smoke(engine, tmp_path) -> None:
    # RAG_PGDATA / RAG_DATABASE_URL of the test session are inherited (set by conftest).
    report = tmp_path / "eval_bench.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--chunks", "500", "--cases", "50", "--recall-queries", "10",
         "--ingest-texts", "10", "--dagster-cases", "0", "--json-out", str(report)],
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
    values = {name: float(match[name]) for name in ("speedup", "share", "keyword", "ratio", "rows", "rss")}
    assert all(math.isfinite(v) and v > 0 for v in values.values()), values

    # the inputs of the ratios are the pipeline's stored results
    data = json.loads(report.read_text(encoding="utf-8"))
    pipe = data["pipeline"]
    with engine.connect() as conn:
        run = conn.execute(sa.text(f"SELECT status, case_count, candidate_count, {', '.join(METRIC_NAMES)} "
                                   "FROM retrieval_evaluation_runs WHERE id = :r"), {"r": pipe["run_id"]}).one()
        averages = ", ".join(f"avg({m})" for m in METRIC_NAMES)
        stored = conn.execute(sa.text(
            "SELECT (SELECT count(*) FROM retrieval_evaluation_candidates WHERE evaluation_run_id = :r), "
            f"count(*), {averages} FROM retrieval_evaluation_case_results WHERE evaluation_run_id = :r"
        ), {"r": pipe["run_id"]}).one()
    assert run.status == "succeeded" and run.case_count == pipe["case_count"] == data["cases"] == 50
    assert run.candidate_count == pipe["candidate_count"] == stored[0] > 0
    assert stored[1] == 50
    for i, metric in enumerate(METRIC_NAMES):
        assert abs(getattr(run, metric) - pipe["averages"][metric]) <= 1e-12, metric
        assert abs(float(stored[2 + i]) - pipe["averages"][metric]) <= 1e-9, metric  # mean of the stored cases
    # ... and the ratios are recomputed from them (the last line rounds)
    floor = sum(data["floor_s"]) / 2
    assert data["eval_over_embed"] == pipe["wall_s"] / floor
    assert data["persist_rows_per_s"] == pipe["candidate_count"] / max(pipe["timings"]["persistence_s"], 1e-9)
    assert math.isclose(values["ratio"], data["eval_over_embed"], rel_tol=0.01, abs_tol=0.01)
    assert math.isclose(values["rows"], data["persist_rows_per_s"], rel_tol=0.01, abs_tol=1)
    # sane bounds: evaluating includes embedding the questions (>= ~1x the embedding floor, minus timing noise)
    # and should not cost more than a couple of hundred times it; the batched pipeline is not slower than the
    # per-question seed baseline by more than noise; COPY moves at least a thousand rows per second
    assert 0.5 <= values["ratio"] <= 300, values
    assert 0.5 <= values["speedup"] <= 500, values
    assert 1e3 <= values["rows"] <= 1e8, values
    assert 50 <= values["rss"] <= 16_000, values
    assert data["sql_share"] == data["retrieval_alone"]["wall_s"] / pipe["wall_s"] > 0  # retrieval alone / pipeline
    assert math.isclose(values["share"], data["sql_share"], rel_tol=0.01, abs_tol=0.01)
