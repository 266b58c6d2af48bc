"""Smoke-run bench/answers_e2e_bench.py at a tiny size against the session's database: the command runs end to
end, the report's official figures equal the transcribed official script's (the bench exits 1 otherwise), no heavy
library is imported, and the breakdown names every stage. No time is asserted (bench/RESULTS.md has them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "answers_e2e_bench.py"
LAST_LINE = re.compile(r"cases=(?P<cases>\d+) wall_s=(?P<wall>\S+) max_rss_mb=(?P<rss>\d+) imports_s=(?P<imports>\S+) "
                       r"heavy=(?P<heavy>\S+) dataset_s=\S+ scoring_s=\S+")


@pytest.mark.slow  # the command three times in subprocesses (timed, -X importtime, cProfile)
def test_answers_e2e_bench_smoke(engine) -> None:
    env = {**os.environ, "RAG_DATABASE_URL": engine.url.render_as_string(hide_password=False),
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(BENCH), "--cases", "60", "--repeats", "1"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    match = LAST_LINE.fullmatch(lines[-1])
    assert match, proc.stdout
    assert match["cases"] == "60" and match["heavy"] == "none", lines[-1]
    assert float(match["wall"]) > 0 and int(match["rss"]) > 0 and float(match["imports"]) > 0
    assert "best wall" in proc.stdout and "official figures equal the official script's" in proc.stdout
    assert any(line.startswith("60 questions (") for line in lines)
    for stage in ("dataset load + check", "scoring", "persistence (run)", "report write", "engine"):
        assert any(line.strip().startswith(stage) for line in lines), stage
    assert any(line.startswith("machine: ") for line in lines)
