"""Smoke-run bench/index_build_bench.py at a tiny size on the session's database: both ingestion paths run, the
table row is complete and consistent (ratio = its two times), both indexes answer with a sane recall, and the
bench leaves no knowledge base behind. No performance target (CI machines are shared and small)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

BENCH = Path(__file__).resolve().parents[1] / "bench" / "index_build_bench.py"
ROW = re.compile(r"\| 400 \| (?P<bulk>[\d.]+) s \((?P<build>[\d.]+) s\) \| (?P<incr>[\d.]+) s \| (?P<ratio>[\d.]+) \| "
                 r"(?P<rb>[\d.]+) / (?P<ri>[\d.]+) \|")


def test_index_build_bench_smoke(engine) -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--sizes", "400"], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    row = next((m for m in map(ROW.fullmatch, proc.stdout.splitlines()) if m), None)
    assert row, proc.stdout
    bulk, build, incr, ratio = (float(row[k]) for k in ("bulk", "build", "incr", "ratio"))
    assert 0 < build <= bulk and incr > 0
    # the printed times are rounded to 0.01 s, the ratio to 0.01: it must lie in the interval they allow
    assert (incr - 0.005) / (bulk + 0.005) - 0.005 <= ratio <= (incr + 0.005) / max(bulk - 0.005, 1e-9) + 0.005
    assert 0.5 <= float(row["rb"]) <= 1 and 0.5 <= float(row["ri"]) <= 1, proc.stdout
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM knowledge_bases WHERE name LIKE 'index-build-%'")
                            ).scalar_one() == 0
