"""Smoke-run bench/dense_leg_bench.py at tiny sizes: it exits 0 only when the float32 preselection finds the same
chunk ids in the same order as the former float64 leg, for every size and k, and prints one row per (size, k)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "dense_leg_bench.py"


def test_dense_leg_bench_smoke() -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--sizes", "150,2000", "--dimension", "64"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| 150 ") or line.startswith("| 2,000 ")]
    assert len(rows) == 4, proc.stdout
    assert all(row.rstrip().endswith("| yes |") for row in rows), proc.stdout
