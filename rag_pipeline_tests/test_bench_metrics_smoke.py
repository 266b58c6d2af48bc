"""Smoke-run bench/metrics_bench.py on a small query set (ranx JIT warm-up dominates)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "metrics_bench.py"
LAST_LINE = re.compile(
    r"ours_s=(?P<ours>\S+) ranx_s=(?P<ranx>\S+) pytrec_s=(?P<pytrec>\S+) "
    r"vs_ranx=(?P<vs_ranx>\S+) vs_pytrec=(?P<vs_pytrec>\S+)"
)


@pytest.mark.slow
def test_metrics_bench_smoke() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--queries", "2000", "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    match = LAST_LINE.fullmatch(proc.stdout.strip().splitlines()[-1])
    assert match, proc.stdout
    values = {name: float(value) for name, value in match.groupdict().items()}
    assert all(value > 0 for value in values.values())
