"""``rag-pipeline check-dataset``: why everything is 0 (:mod:`rag_pipeline.evaluation.datasets.label_check`)."""

from __future__ import annotations

import argparse
import json
import sys

from rag_pipeline.cli.errors import guarded
from rag_pipeline.contracts.label_check import LabelReport
from rag_pipeline.service import datasets
from rag_pipeline.storage.engine import get_engine
from rag_pipeline.storage.names import printable


def format_report(report: LabelReport) -> str:
    """Human-readable check-dataset output: the verdict, then every invalid label grouped by case."""
    lines = [("OK: " if not report.invalid() else "PROBLEMS: ") + report.summary()]
    for case_id, verdict in report.verdicts.items():
        if verdict == "ok":
            continue
        note = "no valid label: this case can only score 0" if verdict == "all_invalid" else "some labels invalid"
        lines.append(f"\ncase {printable(case_id)} ({note})")  # user strings: control characters escaped
        for r in report.rows:
            if r.case_id == case_id and not r.ok:
                lines.append(f"  {printable(r.chunk_id)}  {r.status}\n      {printable(r.detail)}")
    if report.invalid():
        lines.append("\nlabels per status: " + ", ".join(f"{s}={n}" for s, n in report.counts().items()))
    return "\n".join(lines)


@guarded(ValueError)
def cmd_check_dataset(args: argparse.Namespace) -> int:
    checked = datasets.check_dataset(get_engine(), args.dataset, args.knowledge_base)
    if checked.note:
        print(f"note: {checked.note}", file=sys.stderr)
    report = checked.report
    if args.format == "json":
        print(json.dumps([r.model_dump() for r in report.rows], ensure_ascii=False, indent=2))
    else:
        print(format_report(report))
    return 1 if report.invalid() else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check-dataset")
    p.add_argument("--dataset", required=True, help="dataset JSON file")
    p.add_argument("--knowledge-base", help="knowledge base name or id (default: the one the file names)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_check_dataset)
