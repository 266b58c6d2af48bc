"""``rag-pipeline evaluate | runs | show``: offline runs and their history (docs/design.md §7.2, the exit codes
included; the reports: docs/design.md §6.3; the label check: docs/design.md §8)."""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

from rag_pipeline.cli import arguments, output, rescore, retention
from rag_pipeline.cli.errors import ReportNotWrittenError, guarded
from rag_pipeline.cli.output import case_progress
from rag_pipeline.cli.runs_table import comparison_table
from rag_pipeline.contracts.errors import RagError
from rag_pipeline.evaluation.runs.reports import CANDIDATE_MODES, REPORT_FORMATS, CaseNotFoundError
from rag_pipeline.service import evaluations as service
from rag_pipeline.service.case_diagnosis import case_diagnosis
from rag_pipeline.storage.engine import get_engine
from rag_pipeline.storage.files import FileWriteError, atomic_output, check_writable, write_atomic
from rag_pipeline.storage.names import printable
from rag_pipeline.storage.snapshot_readers import reader_count


@guarded()
def cmd_evaluate(args: argparse.Namespace) -> int:
    versions = list(dict.fromkeys(args.strategies or [service.DEFAULT_STRATEGY]))
    plan = service.plan_evaluation(lambda: get_engine(readers=reader_count(args.readers)), args.dataset, versions,
                                   knowledge_base=args.knowledge_base or args.knowledge_base_id)  # nothing written
    dataset = plan.dataset.dataset
    if args.case is not None and args.case not in {c.case_id for c in dataset.cases}:
        raise CaseNotFoundError(f"--case {args.case!r}: dataset {dataset.name!r} has no such case")
    paths = dict(zip(versions, _output_paths(args.output, versions), strict=True))
    for path in paths.values():  # before the run: a run stored as current must not end in "cannot write the report"
        check_writable(path)
    engine = get_engine(readers=reader_count(args.readers))  # a pool sized for --readers
    written: dict[str, Path] = {}
    not_written: list[tuple[str, RagError]] = []

    def write_report(outcome) -> None:
        """Each report as soon as its run is stored, while the other strategies still run."""
        path = paths[outcome.strategy_version]
        if path is None:
            return
        try:
            with atomic_output(path, parents=True) as fp:
                service.write_report(engine, outcome.run_id, fp, **_report_options(args))
        except FileWriteError as exc:  # the run is stored: say which, and that its report is not there
            not_written.append((outcome.run_id, exc))
            return
        written[outcome.strategy_version] = path

    try:
        outcomes = service.evaluate(engine, plan, batch_size=args.batch_size, readers=args.readers,
                                    strict=args.strict, progress=case_progress(args.quiet),
                                    on_labels=_print_label_headline, on_outcome=write_report)
    except RagError:  # another strategy failed: the reports of the runs that were stored are there all the same
        _print_reports(versions, written)
        raise
    summaries = service.run_summaries(engine, [o.run_id for o in outcomes])
    for s in summaries:  # "All metrics are 0: ..." — the dominant reason first
        if s.counts and s.counts.first_line:
            print(f"{s.strategy_version}: {s.counts.first_line}")
    print(comparison_table([s.model_dump() for s in summaries]))
    for s in summaries:
        line = output.latency_line(s)
        if line:
            print(f"{s.strategy_version}: {line}")
    stages = output.stage_table(summaries)
    if stages:
        print("\n" + stages)
    _print_reports(versions, written)
    if not_written:
        raise ReportNotWrittenError(not_written)
    return 0


def _print_reports(versions: list[str], written: dict[str, Path]) -> None:
    for version in versions:
        if version in written:
            print(f"report: {printable(written[version])}", file=sys.stderr)


def _print_label_headline(report) -> None:
    """The first output line of a run with invalid labels (docs/design.md §8): counts, cause, example and fix."""
    headline = service.label_headline(report)
    if headline:
        print(f"warning: {headline}", flush=True)


def _output_paths(output: str | None, versions: list[str]) -> list[Path | None]:
    """One strategy → the path as given; several → ``<stem>-<strategy><suffix>`` each."""
    if not output:
        return [None] * len(versions)
    path = Path(output)
    if len(versions) == 1:
        return [path]
    return [path.with_name(f"{path.stem}-{v}{path.suffix or '.json'}") for v in versions]


@guarded()
def cmd_runs(args: argparse.Namespace) -> int:
    summaries = [s.model_dump() for s in service.run_page(
        get_engine(), knowledge_base=args.knowledge_base, dataset=args.dataset, strategy=args.strategy,
        current_only=args.current, limit=args.limit)[1]]
    if args.format == "json":
        print(json.dumps(summaries, ensure_ascii=False, indent=2))
    else:
        print(comparison_table(summaries) if summaries else "no evaluation runs (see `rag-pipeline evaluate`)")
        failed = [s for s in summaries if s["error"]]
        if failed:
            print("\nwhy runs did not succeed:")
        for s in failed:  # the whole stored reason, one line each
            print(f"  {printable(s['run_id'])[:8]} {printable(s['strategy_version'])} ({s['status']}): "
                  f"{printable(s['error'])}")
    return 0


@guarded()
def cmd_show(args: argparse.Namespace) -> int:
    engine = get_engine()
    # a prefix (as the tables print it) → the full id; an unknown or ambiguous one fails before --output is opened
    run_id = service.run_summaries(engine, [args.run_id])[0].run_id
    if args.global_ranks:
        if args.case is None:
            print("rag-pipeline: error: --global-ranks needs --case CASE_ID (it diagnoses one case)", file=sys.stderr)
            return 2
        return _show_case(engine, run_id, args)
    if args.case is not None:  # an unknown case fails before --output is created
        service.write_report(engine, run_id, io.StringIO(), candidates="none", case_id=args.case)
    if args.output:
        with atomic_output(args.output) as fp:
            _write_shown(engine, run_id, fp, args)
    else:
        _write_shown(engine, run_id, sys.stdout, args)
    return 0


def _write_shown(engine, run_id: str, fp, args: argparse.Namespace) -> None:
    """The report of ``show`` in ``--format`` (``text``: :func:`output.report_text`)."""
    if args.format != "text":
        service.write_report(engine, run_id, fp, **_report_options(args))
        return
    fp.write(output.report_text(service.evaluation_detail(engine, run_id, candidates=args.candidates,
                                                          case_id=args.case, include_text=args.include_text)))


def _report_options(args: argparse.Namespace) -> dict:
    return {"include_text": args.include_text, "candidates": args.candidates, "case_id": args.case,
            "fmt": args.format}


def _add_report_options(p: argparse.ArgumentParser, *, text: bool = False) -> None:
    """``--candidates``, ``--case``, ``--format`` and ``--include-text`` of ``evaluate`` and ``show``."""
    p.add_argument("--candidates", choices=CANDIDATE_MODES, default="default",
                   help="which candidates each case lists: default = the selected ones plus every relevant one (with "
                        "the diagnosis of each missed relevant chunk in miss_reasons); all = the full pool; "
                        "selected; relevant; none (metrics and miss reasons only)")
    p.add_argument("--case", metavar="CASE_ID", help="only this case")
    p.add_argument("--format", choices=REPORT_FORMATS + (("text",) if text else ()), default="json",
                   help="json (one document) or jsonl (a summary line, then one line per case, streamed)"
                        + ("; text: the summary, then per case its metrics, selected chunks and misses with their "
                           "reasons" if text else ""))
    p.add_argument("--include-text", action="store_true", help="add each listed candidate's chunk text")


def _show_case(engine, run_id: str, args: argparse.Namespace) -> int:
    """``show RUN --case ID --global-ranks``: the case's miss diagnosis with exact global ranks, computed now."""
    found = case_diagnosis(engine, run_id, args.case)
    text = json.dumps(found.model_dump(exclude_unset=True), ensure_ascii=False,
                      indent=None if args.format == "jsonl" else 2)
    if args.output:
        write_atomic(args.output, text + "\n")
    else:
        print(text)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``evaluate``, ``runs`` and ``show`` to the ``rag-pipeline`` sub-commands."""
    p = sub.add_parser("evaluate")
    kb = p.add_mutually_exclusive_group()
    kb.add_argument("--knowledge-base", help="knowledge base name (optional if the dataset names it)")
    kb.add_argument("--knowledge-base-id", help="knowledge base id")
    p.add_argument("--dataset", required=True, help="dataset JSON (a bare array of cases, or {knowledge_base, cases})")
    p.add_argument("--strategy", action="append", dest="strategies", metavar="VERSION",
                   help=f"strategy version, repeatable (default {service.DEFAULT_STRATEGY})")
    p.add_argument("--output", help="report JSON; with several strategies one file per strategy "
                                    "(<stem>-<strategy>.json)")
    _add_report_options(p)
    p.add_argument("--batch-size", type=arguments.BATCH_SIZE, default=64,
                   help="cases per retrieval batch (1..10000, default 64)")
    p.add_argument("--readers", type=arguments.READERS, default=None,
                   help="read connections searching batches in parallel (1..64, default: RAG_EVAL_READERS or 2)")
    p.add_argument("--strict", action="store_true",
                   help="refuse to run (exit 1) when any label is not a searchable chunk; without it a run with "
                        "some invalid labels runs and says so first (a dataset with no valid label never runs)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("runs")
    p.add_argument("--knowledge-base", "--knowledge-base-id", dest="knowledge_base", help="name or id")
    p.add_argument("--dataset", help="dataset name")
    p.add_argument("--strategy", help="strategy version")
    p.add_argument("--current", action="store_true", help="only the current run of each dataset × strategy")
    p.add_argument("--limit", type=arguments.LIMIT, default=100, help="at most this many runs (1..100000, default 100)")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(func=cmd_runs)
    rescore.register(retention.register(p))

    p = sub.add_parser("show")
    p.add_argument("run_id", help="a run id, or a unique prefix of one (at least 4 hex digits, as `runs` prints it)")
    _add_report_options(p, text=True)
    p.add_argument("--output", help="write to this file instead of stdout")
    p.add_argument("--global-ranks", action="store_true",
                   help="with --case: instead of the report, the case's miss diagnosis computed now, with each missed "
                        "relevant chunk's exact rank among every chunk of the knowledge base in each leg")
    p.set_defaults(func=cmd_show)
