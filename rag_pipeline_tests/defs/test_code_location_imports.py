"""Loading the code location (``rag_pipeline.definitions``: what the daemon, every run worker and the HTTP API's
launcher import) does not import the heavy libraries; each is imported where it is used (a tokenizer when answers
are scored, scipy.stats when statistics are computed, matplotlib when a chart is drawn, the models when text is
embedded or reranked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ("nltk", "scipy.stats", "matplotlib", "sklearn", "pandas", "torch", "sentence_transformers",
         "transformers", "jieba", "tensorflow", "tensorflow_hub")


def test_loading_the_code_location_imports_no_heavy_library():
    code = ("import json, sys, rag_pipeline.definitions; "
            f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [], "imported when the code location loads"
