"""``rag-pipeline compare``: which strategy is better; exit 1 when the regression gate fails (use it in CI)."""

from __future__ import annotations

import argparse
import json
import sys

from rag_pipeline.cli import arguments
from rag_pipeline.cli.errors import guarded
from rag_pipeline.service import analysis
from rag_pipeline.service.analysis import DEFAULT_BASELINE, render_text
from rag_pipeline.storage.engine import get_engine


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
    p = sub.add_parser("compare")
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
