"""What ``make dev`` and ``make test`` run besides the package: no warning about the project's own entry point or
Dagster's superseded ``dagster dev``, and the browser tests' Chromium installed or asked for, never skipped."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

from dagster._cli.dev import dev_command
from dagster._symbol_annotations.lifecycle import _get_subject
from dagster_shared.utils.warnings import supersession_warning

from rag_pipeline.cli import serve

ROOT = Path(__file__).resolve().parents[1]


def test_the_module_serve_runs_itself_as_imports_without_a_warning():
    proc = subprocess.run([sys.executable, "-W", "error", "-m", serve.SELF_MODULE, "--help"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0 and "Warning" not in proc.stderr, proc.stderr
    assert proc.stdout.startswith("usage: rag-pipeline")


def test_make_dev_filters_exactly_dagsters_dev_supersession_warning():
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    action, message = re.search(r"^DEV_WARNING := (\w+):(.+)$", make, re.M).groups()
    assert action == "ignore" and "PYTHONWARNINGS='$(DEV_WARNING)' $(BIN)/dagster dev" in make
    for filtered, expected in ((False, 1), (True, 0)):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            if filtered:  # what PYTHONWARNINGS does with it: the message's start, literally
                warnings.filterwarnings(action, message=re.escape(message))
            supersession_warning(_get_subject(dev_command.callback), "Use 'dg dev' instead.")
        assert len(seen) == expected


def test_make_test_installs_or_asks_for_chromium_rather_than_skipping_the_browser_tests():
    dry = subprocess.run(["make", "-n", "test"], capture_output=True, text=True, cwd=ROOT, timeout=60).stdout
    assert dry.index(".ci/chromium") < dry.index("pytest -q")
    proc = subprocess.run([str(ROOT / ".ci/chromium")], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "CHROMIUM": "/nonexistent/chromium"})
    assert proc.returncode == 1
    assert "/nonexistent/chromium is missing" in proc.stderr and "apt-get install chromium" in proc.stderr
