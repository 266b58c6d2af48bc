"""Smoke-run bench/answers_bench.py on a small case set: it runs, its EM / F1 equal the official scripts' on its
baseline cases, and its last line's figures are consistent."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "answers_bench.py"
LAST_LINE = re.compile(
    r"cases=(?P<cases>\d+) ours_s=(?P<ours>\S+) ours_cpu_s=(?P<cpu>\S+) text_s=(?P<text>\S+) "
    r"official_s=(?P<official>\S+) vs_official=(?P<ratio>\S+) max_diff=(?P<diff>\S+)"
)


@pytest.mark.slow  # the bench in a subprocess, including the official O(n*m) LCS
def test_answers_bench_smoke() -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--cases", "300", "--baseline-cases", "100"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    match = LAST_LINE.fullmatch(lines[-1])
    assert match, proc.stdout
    values = {k: float(v) for k, v in match.groupdict().items()}
    assert values["cases"] == 300 and values["diff"] <= 1e-9
    assert values["ratio"] == pytest.approx(values["official"] / values["text"], rel=0.01, abs=0.006)
    assert 0 < values["ours"] < 60 and 0 < values["text"] < values["official"], values
    [verdicts] = [line for line in lines if line.startswith("verdicts: ")]
    counts = {k: int(v) for k, v in (item.split("=") for item in verdicts.removeprefix("verdicts: ").split())}
    assert sum(counts.values()) == 300 and counts["correct"] > 0 and counts["answered_unanswerable"] > 0
    assert any(line.startswith("machine: ") for line in lines)
