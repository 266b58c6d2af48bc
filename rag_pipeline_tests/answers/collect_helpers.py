"""Shared by the collection tests: a small dataset file and ``answers collect`` run as the CLI runs it."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from rag_pipeline.cli.answers.collect import add_collect_parser


def write_dataset(folder: Path, n: int, name: str = "collect") -> Path:
    """A dataset of ``n`` cases ``case-000`` … on knowledge base ``demo`` (the questions hold quotes and a line
    break, so the request template's escaping is exercised)."""
    cases = [{"case_id": f"case-{i:03d}", "question": f'What is "item" {i}?\nSay\\why.', "k": 3 + i % 3,
              "relevant_chunk_ids": [str(uuid.uuid5(uuid.NAMESPACE_URL, f"chunk-{i}"))]} for i in range(n)]
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"name": name, "knowledge_base": "demo", "cases": cases}), encoding="utf-8")
    return path


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def run_cli(argv: list[str]) -> int:
    """``rag-pipeline answers collect ARGV`` through its own parser (the ``answers`` group is wired in main)."""
    parser = argparse.ArgumentParser(prog="rag-pipeline answers")
    add_collect_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["collect", *argv])
    return args.func(args)


def collect_killed_after(argv: list[str], out: Path, lines: int, *, timeout: float = 90) -> set[str]:
    """Run ``answers collect ARGV`` in a subprocess, SIGKILL it once ``out`` has ``lines`` lines, and return the
    case ids the file then holds answered (a torn last line left out)."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "rag_pipeline_tests.answers.collect_helpers", *argv], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(root)})
    deadline = time.monotonic() + timeout
    while (not out.exists() or out.read_bytes().count(b"\n") < lines) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    kept = read_lines(out) if out.read_bytes().endswith(b"\n") else read_lines(out)[:-1]
    return {line["case_id"] for line in kept if line["status"] == "ok"}


if __name__ == "__main__":
    sys.exit(run_cli(sys.argv[1:]))
