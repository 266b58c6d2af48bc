"""Smoke-run bench/stats_bench.py: both implementations run at two sizes and agree up to Monte-Carlo noise."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "stats_bench.py"
RATIO = re.compile(r"ratio_scipy_vs_numpy_permutation_(?P<n>\d+)=(?P<ratio>\S+) p_scipy=(?P<p>\S+) p_numpy=(?P<p0>\S+)")


@pytest.mark.slow  # the bench end to end in a subprocess (scipy's permutation tests at two sizes)
def test_stats_bench_smoke() -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--sizes", "30,300", "--resamples", "4000",
                           "--repeats", "1", "--compare-size", "60"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("machine: ")
    found = {int(m["n"]): m for m in map(RATIO.fullmatch, lines) if m}
    assert sorted(found) == [30, 300], proc.stdout
    for match in found.values():
        p, p0 = float(match["p"]), float(match["p0"])
        assert 0 < p <= 1 and 0 < p0 <= 1
        # scipy's permutation test vs the numpy yardstick: same work, so within two orders of magnitude
        assert 0.01 <= float(match["ratio"]) <= 100, match.group(0)
        # same test, other random sign flips: 4000 draws put both within a few standard errors of each other
        assert abs(p - p0) <= 4 * (max(p * (1 - p), 1e-4) / 4000) ** 0.5 + 1e-3, match.group(0)
    compare = re.fullmatch(r"compare: 8 strategies x 4 metrics x 60 cases, 4000 resamples: (\S+) s "
                           r"\(numpy baseline (\S+) s, ratio (\S+)\)", lines[-1])
    assert compare, lines[-1]
    seconds, baseline, ratio = map(float, compare.groups())
    assert 0 < seconds < 300 and 0 < baseline < 300, lines[-1]
    # the printed seconds are rounded to 0.01 s: the ratio must lie within what those roundings allow
    low, high = (seconds - 0.005) / (baseline + 0.005), (seconds + 0.005) / max(baseline - 0.005, 1e-9)
    assert low - 0.01 <= ratio <= high + 0.01, lines[-1]
    assert 0.01 <= ratio <= 100, lines[-1]
