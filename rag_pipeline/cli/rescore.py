"""``rag-pipeline runs rescore``: a stored run's pools scored on new labels, as a new run (docs/labelling.md)."""

from __future__ import annotations

import argparse
import sys

from rag_pipeline.analysis.text_table import text_table
from rag_pipeline.cli.errors import guarded
from rag_pipeline.cli.output import print_json
from rag_pipeline.contracts.metrics import METRIC_LABELS, METRIC_NAMES
from rag_pipeline.contracts.runs import RunSummary
from rag_pipeline.service import evaluations as service
from rag_pipeline.storage.engine import get_engine
from rag_pipeline.storage.names import printable


def _row(label: str, s: RunSummary) -> list[str]:
    judged = s.counts.judged if s.counts else None
    return [label, s.run_id[:8], s.dataset.version[:12],
            *(f"{getattr(s.metrics, m):.4f}" if s.metrics else "-" for m in METRIC_NAMES),
            f"{judged.at_k:.2f}" if judged and judged.at_k is not None else "-",
            str(judged.unjudged_at_k) if judged else "-"]


@guarded()
def cmd_rescore(args: argparse.Namespace) -> int:
    done = service.rescore(get_engine(), args.run_id, args.dataset, version=args.dataset_version)
    if args.format == "json":
        print_json(done.model_dump(mode="json"))
        return 0
    new, old = done.run, done.rescored_from
    print(f"stored run {new.run_id} of {printable(new.strategy_version)} on {printable(new.dataset.name)} version "
          f"{new.dataset.version[:12]}: run {old.run_id[:8]}'s stored pools scored on the new labels, nothing "
          f"retrieved{' (current)' if new.is_current else ''}")
    print(text_table(["", "run", "dataset version", *(METRIC_LABELS[m] for m in METRIC_NAMES), "Judged@k",
                      "unjudged"], [_row("before", old), _row("after", new)]))
    if done.cases_left_out:
        print(f"note: {len(done.cases_left_out)} case(s) of run {old.run_id[:8]} are not in the new version, left "
              f"out (e.g. {', '.join(printable(c) for c in done.cases_left_out[:3])})", file=sys.stderr)
    return 0


def register(runs_sub: argparse._SubParsersAction) -> None:
    """Add ``rescore`` under ``rag-pipeline runs``."""
    p = runs_sub.add_parser("rescore", help="score a stored run's candidate pools on new labels (a new dataset "
                                            "version) as a new run, without retrieving again",
                            description="Copy a succeeded run's stored pools into a new run on another version of "
                                        "its dataset and recompute every metric, miss reason and Judged@k from the "
                                        "new labels. Nothing is searched or embedded, so every case of the version "
                                        "must be a case of the run with the same question and k. The new run is "
                                        "elected current as an evaluated run is (docs/labelling.md).")
    p.add_argument("run_id", help="the run to re-score (id or unique prefix, as `runs` prints it)")
    p.add_argument("--dataset", required=True, help="the new labels: a dataset file, a stored version id, or a "
                                                    "stored dataset name (its latest version on the run's knowledge "
                                                    "base)")
    p.add_argument("--dataset-version", metavar="HASH", help="with a stored name: this version (a hash prefix)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_rescore)
