"""Smoke-run bench/leg_load_bench.py on the demo knowledge base, both legs: the load's traced peak holds at least
what the index keeps; the vector leg's stays within the memory budget's estimate (the keyword estimate counts
postings only, which a knowledge base of a few thousand does not reach: per-chunk and per-lexeme costs lead there).
No timing target."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import leg_load_bench  # noqa: E402


@pytest.mark.parametrize("leg", ["vector", "keyword"])
def test_leg_load_bench_smoke(engine, demo_kb, leg) -> None:
    r = leg_load_bench.measure(engine, demo_kb, leg, "use-multilingual-v3")
    assert r["count"] > 100
    assert 0 < r["kept_mib"] <= r["peak_mib"], r
    if leg == "vector":
        assert r["kept_bytes_per_unit"] >= 4, "the float32 matrix itself is kept"
        assert r["peak_mib"] <= r["estimate_mib"], r
