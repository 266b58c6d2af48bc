"""``rag-pipeline runs prune``: remove old evaluation runs (:mod:`rag_pipeline.service.retention`)."""

from __future__ import annotations

import argparse

from rag_pipeline.cli import arguments
from rag_pipeline.cli.errors import guarded
from rag_pipeline.cli.runs_table import utc_minute
from rag_pipeline.service import retention
from rag_pipeline.storage.engine import get_engine
from rag_pipeline.storage.names import printable

KEEP_LAST = arguments.int_between(0, 1_000_000)
DAYS = arguments.finite_float(0, 100_000)


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


@guarded()
def cmd_prune(args: argparse.Namespace) -> int:
    result = retention.prune_runs(get_engine(), keep_last=args.keep_last, older_than_days=args.older_than,
                                  dataset=args.dataset, dry_run=args.dry_run, include_compared=args.include_compared)
    verb = "would remove" if result.dry_run else "removed"
    for r in result.runs:
        print(f"{verb} {r.run_id[:8]}  {printable(r.strategy_version)} on {printable(r.dataset)} "
              f"({printable(r.knowledge_base)}), {r.status}, started {utc_minute(r.started_at)} UTC: "
              f"{r.candidate_rows} candidate rows, {_size(r.bytes)}")
    print(f"{verb} {len(result.runs)} run(s), {result.candidate_rows} candidate rows, {_size(result.bytes_freed)} "
          f"freed" + (" (dry run: nothing removed)" if result.dry_run else ""))
    if result.answer_runs:
        print(f"{verb} {len(result.answer_runs)} answer run(s) ("
              f"{sum(r.cases for r in result.answer_runs)} case results)")
    if result.kept_for_comparison:
        print(f"kept {result.kept_for_comparison} old run(s) that a stored comparison refers to "
              "(--include-compared removes them too)")
    return 0


def register(runs_parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    """Add ``prune`` under ``rag-pipeline runs``; returns the sub-commands of ``runs``."""
    sub = runs_parser.add_subparsers(dest="runs_command", metavar="{prune,rescore}")
    p = sub.add_parser("prune", help="remove old runs (never a current run, a running one, or one a stored "
                                     "comparison refers to)")
    p.add_argument("--keep-last", type=KEEP_LAST, required=True, metavar="N",
                   help="keep the N newest runs of every dataset × knowledge base × strategy (current runs are "
                        "always kept)")
    p.add_argument("--older-than", type=DAYS, metavar="DAYS", help="only remove runs started at least DAYS ago")
    p.add_argument("--dataset", help="only runs of this dataset name")
    p.add_argument("--dry-run", action="store_true", help="print what would be removed; remove nothing")
    p.add_argument("--include-compared", action="store_true",
                   help="also remove old runs the latest stored comparison of a dataset refers to")
    p.set_defaults(func=cmd_prune)
    return sub
