"""bench/generator_bench.py without the optional generator: it says what is missing and exits 0; its EM/F1
transcription gives the official SQuAD v2.0 / CMRC 2018 values on hand-checked pairs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "generator_bench.py"


def _bench():
    spec = importlib.util.spec_from_file_location("generator_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is not None, reason="llama-cpp-python is installed")
def test_skips_cleanly_without_llama_cpp(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH), "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("generator bench skipped: llama-cpp-python is not installed "
                                   "(pip install llama-cpp-python; it builds from source)")
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_em_f1_are_the_projects_squad_v2_and_cmrc_scoring():
    bench = _bench()
    # SQuAD v2.0: lower case, punctuation and articles dropped, then word overlap
    assert bench.exact("The 7 days.", "7 days") == 1.0
    assert bench.f1("at least 24 hours", "24 hours between steps") == pytest.approx(0.5)  # 2 of 4 each side
    assert bench.f1("at least 24 hours", "24 hours") == pytest.approx(2 * 1 * (2 / 4) / (1 + 2 / 4))
    assert bench.f1("600 requests per minute", "100 requests per minute") == pytest.approx(0.75)
    # CMRC 2018 (the project's scoring): each Chinese character a token, F1 from the longest common run
    assert bench.f1("25 天", "每年 25 天。") == pytest.approx(2 * (2 / 4) * 1 / (2 / 4 + 1))
    assert bench.exact("25 天", "25 天。") == 1.0  # its punctuation is removed before EM …
    assert bench.exact("25 天", "25天") == 0.0  # … white space is not (the official script's rule)
    # SQuAD v2.0 no-answer: a refusal is right only on an unanswerable case
    unanswerable = {"answerable": False, "references": []}
    answerable = {"answerable": True, "references": ["7 days"]}
    assert bench.score(unanswerable, "", True) == (1.0, 1.0)
    assert bench.score(unanswerable, "No.", False) == (0.0, 0.0)
    assert bench.score(answerable, "Insufficient information to answer.", True) == (0.0, 0.0)
    assert bench.score({"answerable": True, "references": []}, "x", False) is None
