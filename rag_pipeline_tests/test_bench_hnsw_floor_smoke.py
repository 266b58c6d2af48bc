"""Smoke-run bench/hnsw_floor.py on the demo knowledge base: the three statements return a full fetch for every
question, the same number of rows, at a positive rate; a strategy without an HNSW leg is refused. No performance
target (CI machines are shared and small)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import hnsw_floor  # noqa: E402


def test_hnsw_floor_smoke(engine, demo_kb) -> None:
    dataset = ROOT / "datasets" / "demo.json"
    rows = hnsw_floor.floor(dataset, ["hybrid-bm25-v1", "vector-v1"], readers=2)
    with engine.connect() as conn:
        searchable = conn.execute(sa.text(
            "SELECT count(*) FROM chunk_embeddings e JOIN knowledge_bases k ON k.id = e.knowledge_base_id "
            "WHERE k.name = :n AND e.model = 'use-multilingual-v3'"), {"n": demo_kb}).scalar_one()
    for row in rows:
        expected = row["questions"] * min(row["fetch"], searchable)
        statements = ("pipeline statement", "walk statement", "bare index walk")
        assert [row[s]["rows"] for s in statements] == [expected] * 3, row
        assert all(row[s]["questions_per_s"] > 0 for s in statements)
        assert row["ef_search"] >= min(row["fetch"], 100)
    with pytest.raises(SystemExit, match="no HNSW vector leg"):
        hnsw_floor.floor(dataset, ["vector-exact-v1"], readers=1)
