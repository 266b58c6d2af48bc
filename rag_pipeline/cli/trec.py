"""``rag-pipeline trec``: TREC run files and qrels (:mod:`rag_pipeline.service.trec`; docs/evaluating.md)."""

from __future__ import annotations

import argparse
import sys

from rag_pipeline.cli import arguments
from rag_pipeline.cli.errors import guarded
from rag_pipeline.cli.output import print_json
from rag_pipeline.contracts.trec import TrecExport
from rag_pipeline.service import trec
from rag_pipeline.storage.engine import get_engine
from rag_pipeline.storage.names import printable


@guarded()
def cmd_import_run(args: argparse.Namespace) -> int:
    result = trec.import_run(get_engine(), args.run, strategy=args.strategy, dataset=args.dataset,
                             knowledge_base=args.knowledge_base, version=args.dataset_version)
    if args.format == "json":
        print_json(result.model_dump())
        return 0
    print(f"stored run {result.run_id} of {printable(result.strategy_version)} on {printable(result.dataset)} "
          f"(version {result.dataset_version[:12]}, knowledge base {printable(result.knowledge_base)}): "
          f"{result.lines_stored:,} of {result.lines:,} lines, {result.cases} cases")
    if result.cases_without_lines:
        print(f"note: {result.cases_without_lines} case(s) of the dataset have no line in the file: stored as empty "
              "rankings (every metric 0, as trec_eval -c)", file=sys.stderr)
    if result.unknown_topics:
        shown = ", ".join(printable(q) for q in result.unknown_topic_examples)
        print(f"note: {result.unknown_topics} topic(s) of the file ({result.unknown_topic_lines:,} lines) are no case "
              f"of the dataset, not stored (e.g. {shown})", file=sys.stderr)
    print("  ".join(f"{m}={v:.4f}" for m, v in result.metrics.items()))
    return 0


def _written(result: TrecExport) -> None:
    for path, lines in result.files.items():
        print(f"wrote {printable(path)} ({lines:,} lines)")
    if result.tied_scores:
        print(f"note: {result.tied_scores} candidate(s) tie with the one ranked above them and trec_eval, which "
              "orders ties by docno descending, would put them first; --scores rank keeps the stored order",
              file=sys.stderr)


@guarded()
def cmd_export_run(args: argparse.Namespace) -> int:
    _written(trec.export_run(get_engine(), args.run_id, args.output, args.tag, args.scores))
    return 0


@guarded()
def cmd_export_qrels(args: argparse.Namespace) -> int:
    _written(trec.export_dataset(get_engine(), args.dataset, args.qrels, args.topics,
                                 knowledge_base=args.knowledge_base, version=args.dataset_version))
    return 0


@guarded()
def cmd_import_qrels(args: argparse.Namespace) -> int:
    name, dataset_id, cases = trec.import_dataset(get_engine(), args.qrels, args.topics, name=args.name,
                                                  knowledge_base=args.knowledge_base, k=args.k)
    print(f"stored dataset {printable(name)} ({cases} cases), version id {dataset_id}")
    return 0


def _dataset_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, help="a dataset file, a stored version id, or a stored name")
    p.add_argument("--knowledge-base", help="knowledge base name or id (default: the one the dataset names)")
    p.add_argument("--dataset-version", help="hash prefix of a stored version of a named dataset (default: latest)")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``trec import-run | export-run | import-qrels | export-qrels``."""
    group = sub.add_parser("trec")
    commands = group.add_subparsers(dest="trec_command", required=True)
    p = commands.add_parser("import-run", help="store a run file (qid Q0 docno rank score tag) as a run of a named "
                                               "external strategy on a dataset (trec_eval's ordering)")
    p.add_argument("run", help="the run file")
    p.add_argument("--strategy", required=True, help="the name the run is stored under (e.g. my-retriever-v1)")
    _dataset_arguments(p)
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_import_run)
    p = commands.add_parser("export-run", help="write a stored run as a TREC run file (its whole candidate pools)")
    p.add_argument("run_id", help="run id or a unique prefix (see `rag-pipeline runs`)")
    p.add_argument("--output", required=True, help="the run file to write")
    p.add_argument("--tag", help="the tag column (default: the strategy version)")
    p.add_argument("--scores", choices=["stored", "rank"], default="stored",
                   help="stored: the final scores (trec_eval re-orders equal scores by docno); rank: 1/rank, which "
                        "trec_eval reads back in exactly the stored order")
    p.set_defaults(func=cmd_export_run)
    p = commands.add_parser("export-qrels", help="write a dataset as qrels (graded) + topics (JSON Lines)")
    _dataset_arguments(p)
    p.add_argument("--qrels", required=True, help="the qrels file to write (qid 0 docno grade)")
    p.add_argument("--topics", required=True, help="the topics file to write (one JSON object per line: qid, "
                                                   "question, k, ...)")
    p.set_defaults(func=cmd_export_qrels)
    p = commands.add_parser("import-qrels", help="store qrels + topics (JSON Lines) as a dataset")
    p.add_argument("--qrels", required=True, help="qrels file (qid iteration docno grade)")
    p.add_argument("--topics", required=True, help="topics file: one JSON object per line with qid and question "
                                                   "(optional k, answerable, reference_answers, key_points)")
    p.add_argument("--name", required=True, help="the dataset name")
    p.add_argument("--knowledge-base", required=True, help="knowledge base name or id the documents belong to")
    p.add_argument("--k", type=arguments.K, default=10, help="k of a topic without one (1..1000, default 10)")
    p.set_defaults(func=cmd_import_qrels)
