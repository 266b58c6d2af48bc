"""Shared by the collection tests: a small dataset file and ``answers collect`` run as the CLI runs it."""

from __future__ import annotations

import argparse
import json
import sys
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


if __name__ == "__main__":
    sys.exit(run_cli(sys.argv[1:]))
