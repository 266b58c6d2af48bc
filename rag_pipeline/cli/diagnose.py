"""``rag-pipeline check-dataset`` and ``rag-pipeline compare``: why everything is 0, and which strategy is better.

``check-dataset --dataset FILE [--knowledge-base NAME] [--format text|json]`` classifies every relevant id
(:mod:`rag_pipeline.evaluation.datasets.label_check`); ``--format json`` prints a list of ``{"case_id", "chunk_id",
"status", "detail"}``. A file whose only problems are non-UUID ids is still checked (status ``not_a_uuid``).
Exit 0: every label is valid; 1: some labels are invalid; 2: user error (unreadable dataset, unknown KB).

``compare --dataset NAME_OR_FILE [--baseline V] [--margin X] [--alpha A] [--format text|json]`` compares the
current runs of every strategy on the dataset (:mod:`rag_pipeline.analysis.comparison`). Exit 0: the regression
gate passed; 1: some strategy is significantly worse than the baseline on nDCG@k by more than the margin
(use it in CI); 2: user error (nothing evaluated, unknown baseline).
"""

from __future__ import annotations

import argparse
import json
import sys

from rag_pipeline.cli import arguments
from rag_pipeline.cli.errors import guarded
from rag_pipeline.contracts.label_check import LabelReport
from rag_pipeline.service import analysis, datasets
from rag_pipeline.service.analysis import DEFAULT_BASELINE, render_text
from rag_pipeline.service.catalog import printable
from rag_pipeline.service.database import get_engine


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


@guarded(ValueError)
def cmd_compare(args: argparse.Namespace) -> int:
    result = analysis.compare(get_engine(), args.dataset, knowledge_base=args.knowledge_base,
                              dataset_version=args.dataset_version, baseline=args.baseline, margin=args.margin,
                              alpha=args.alpha, n_resamples=args.resamples)
    if args.format == "json":
        print(json.dumps(result.model_dump(mode="json"), ensure_ascii=False, indent=2))
    else:
        sys.stdout.write(render_text(result))
    return 0 if result.gate.passed else 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check-dataset", help="check every relevant id of a dataset against a knowledge base "
                                             "(why are all metrics 0?); exit 1 when some label is invalid")
    p.add_argument("--dataset", required=True, help="dataset JSON file")
    p.add_argument("--knowledge-base", help="knowledge base name or id (default: the one the file names)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_check_dataset)

    p = sub.add_parser("compare", help="compare the current runs of every strategy on a dataset with a baseline "
                                       "(paired significance, regression gate: exit 1 when it fails)")
    p.add_argument("--dataset", required=True, help="dataset name, or its JSON file")
    p.add_argument("--knowledge-base", help="only when the dataset name is used with several knowledge bases")
    p.add_argument("--dataset-version", metavar="HASH",
                   help="compare the runs on this dataset version (content hash or a prefix; default: the latest "
                        "version — strategies without a run on it are listed as stale, never mixed in)")
    p.add_argument("--baseline", default=DEFAULT_BASELINE, help=f"baseline strategy (default {DEFAULT_BASELINE})")
    p.add_argument("--margin", type=arguments.MARGIN, default=0.0, help="gate: nDCG@k loss tolerated (default 0)")
    p.add_argument("--alpha", type=arguments.ALPHA, default=0.05, help="gate: significance level (default 0.05)")
    p.add_argument("--resamples", type=arguments.RESAMPLES, default=10000,
                   help="permutation/bootstrap resamples (1..1000000)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_compare)
