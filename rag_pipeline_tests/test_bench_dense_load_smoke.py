"""Smoke-run bench/dense_load_bench.py on the demo knowledge base: the load's traced peak holds at least the float32
matrix and stays within the memory budget's estimate. No timing target."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import dense_load_bench  # noqa: E402


def test_dense_load_bench_smoke(engine, demo_kb) -> None:
    r = dense_load_bench.measure(engine, demo_kb, "use-multilingual-v3")
    assert r["vectors"] > 10 and r["dimension"] == 512
    assert r["kept_bytes_per_component"] >= 4, "the float32 matrix itself is kept"
    assert r["kept_mib"] <= r["peak_mib"] <= r["estimate_mib"], r
