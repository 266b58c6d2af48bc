"""Smoke-run bench/http_retriever_bench.py at a small scale: the endpoint process starts, every level gets every
case's full ranking, and the printed ratios are the recorded throughputs over N / latency, within sane bounds (wide:
CI machines are shared and small, so no performance target here; bench/RESULTS.md has the measured figures)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "http_retriever_bench.py"
LAST_LINE = re.compile(r"ratio_c1=(?P<c1>\S+) ratio_c4=(?P<c4>\S+) load1=\S+")


@pytest.mark.slow  # a bench subprocess with its own endpoint process
def test_http_retriever_bench_smoke(tmp_path) -> None:
    report = tmp_path / "http.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--latency-ms", "20", "--concurrency", "1,4", "--seconds", "0.4",
         "--json-out", str(report)], capture_output=True, text=True, timeout=300, cwd=ROOT / "bench",
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    match = LAST_LINE.fullmatch(proc.stdout.strip().splitlines()[-1])
    assert match, proc.stdout
    rows = json.loads(report.read_text(encoding="utf-8"))["levels"]
    assert [r["concurrency"] for r in rows] == [1, 4]
    for row, printed in zip(rows, (match["c1"], match["c4"]), strict=True):
        assert row["cases"] >= 20 and row["ideal_per_s"] == row["concurrency"] * 1000 / 20
        assert abs(row["cases_per_s"] - row["cases"] / row["seconds"]) < 0.05 * row["cases_per_s"]
        assert float(printed) == row["ratio"] and 0.01 < row["ratio"] <= 1.05
        assert row["latency_ms_p50"] >= 20 and row["latency_ms_p50"] <= row["latency_ms_p95"] <= row["latency_ms_max"]
