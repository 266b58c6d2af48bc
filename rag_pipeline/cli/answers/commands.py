"""``rag-pipeline answers evaluate | runs | show | compare`` (docs/design.md §7.2, §12); ``collect``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from rag_pipeline.answers.predictions_file import predictions_json
from rag_pipeline.cli import arguments
from rag_pipeline.cli.answers.collect import add_collect_parser
from rag_pipeline.cli.answers.tables import comparison_text, report_text, runs_text
from rag_pipeline.cli.commands import EXIT_CODES_HELP
from rag_pipeline.cli.errors import ReportNotWrittenError, guarded
from rag_pipeline.contracts.answers import (
    ANSWER_CONVENTIONS,
    ANSWER_METRIC_NAMES,
    VERDICTS,
    AnswerReport,
    AnswerScoring,
)
from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.contracts.judge import JudgeConfig
from rag_pipeline.service import answers as service
from rag_pipeline.settings import get_settings
from rag_pipeline.storage.engine import get_engine
from rag_pipeline.storage.files import (
    FileReadError,
    FileWriteError,
    atomic_output,
    check_writable,
    read_bounded,
    write_atomic,
)
from rag_pipeline.storage.names import printable

JUDGE_KEY_VARIABLE = "RAG_JUDGE_API_KEY"
"""The judge's bearer token, when it needs one, is read from this environment variable (never a flag)."""
F1_THRESHOLD = arguments.finite_float(0.0, 1.0)
JUDGE_REPEATS = arguments.int_between(1, 20)
SORT_CHOICES = [*ANSWER_METRIC_NAMES, *(f"-{m}" for m in ANSWER_METRIC_NAMES)]
MAX_PHRASES_BYTES = 1024 * 1024


class AnswersFlagError(BadInputError, ValueError):
    """A flag of an ``answers`` command that cannot be used (named in the message)."""


def _refusal_phrases(path: str | None) -> tuple[str, ...] | None:
    """``--refusal-phrases FILE``: one phrase a line (blank lines and ``#`` comments skipped), bounded read."""
    if path is None:
        return None
    source = Path(path)
    try:
        text = read_bounded(source, MAX_PHRASES_BYTES, what="the refusal phrases file").decode("utf-8")
    except FileReadError as exc:
        raise AnswersFlagError(f"--refusal-phrases {exc}") from None
    except UnicodeDecodeError as exc:
        raise AnswersFlagError(f"--refusal-phrases {printable(source)}: not UTF-8 (byte {exc.start})") from None
    phrases = tuple(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    if not phrases:
        raise AnswersFlagError(f"--refusal-phrases {printable(source)}: no phrase in it (one phrase a line)")
    return phrases


def _judge(args: argparse.Namespace) -> JudgeConfig | None:
    if args.judge_url is None and args.judge_model is None:
        if args.judge_repeats is not None:
            raise AnswersFlagError("--judge-repeats needs --judge-url and --judge-model")
        return None
    if args.judge_url is None or args.judge_model is None:
        raise AnswersFlagError("give both --judge-url and --judge-model (an OpenAI-compatible chat endpoint)")
    try:
        return JudgeConfig(url=args.judge_url, model=args.judge_model, repeats=args.judge_repeats or 1,
                           api_key=get_settings().judge_api_key)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise AnswersFlagError(f"--judge-{str(first['loc'][0]).replace('_', '-')}: {first['msg']}") from None


def _judge_progress(quiet: bool):
    from tqdm import tqdm  # noqa: PLC0415 - as cli.output does

    bar: list[tqdm] = []

    def progress(done: int, total: int) -> None:
        if not bar:
            bar.append(tqdm(total=total, desc="judge", unit="answer", file=sys.stderr, disable=quiet))
        bar[0].update(done - bar[0].n)
        if done >= total:
            bar[0].close()

    return progress


_NO_CASES = '"cases": []\n}'


def report_json(report: AnswerReport) -> Iterator[str]:
    """``report.model_dump_json(indent=2)`` and a newline, in pieces: the run and summary, then one case at a
    time (a case's JSON is indented as the whole report's; JSON strings hold no raw newline)."""
    head = report.model_copy(update={"cases": []}).model_dump_json(indent=2)
    if not report.cases or not head.endswith(_NO_CASES):
        yield report.model_dump_json(indent=2) + "\n"
        return
    yield head.removesuffix("[]\n}") + "[\n"
    for i, case in enumerate(report.cases):
        yield ("    " if i == 0 else ",\n    ") + case.model_dump_json(indent=2).replace("\n", "\n    ")
    yield "\n  ]\n}\n"


def write_report(path: Path, report: AnswerReport) -> None:
    """The report JSON written whole by the one file writer, streamed case by case."""
    with atomic_output(path, parents=True) as handle:
        for piece in report_json(report):
            handle.write(piece)


@guarded()
def cmd_evaluate(args: argparse.Namespace) -> int:
    scoring = AnswerScoring(**({} if args.f1_threshold is None else {"f1_correct_threshold": args.f1_threshold}),
                            refusal_phrases=_refusal_phrases(args.refusal_phrases), convention=args.convention)
    judge = _judge(args)
    output = Path(args.output) if args.output else None
    check_writable(output)  # before the run is stored: a stored run must not end in "cannot write the report"
    report = service.evaluate_answers(get_engine(), args.knowledge_base, args.dataset, args.answers,
                                      answerer=args.answerer, scoring=scoring, store=not args.no_store, judge=judge,
                                      judge_progress=_judge_progress(args.quiet) if judge else None)
    if output is not None:
        try:
            write_report(output, report)
        except FileWriteError as exc:
            if report.run is None:  # --no-store: nothing was stored
                raise
            print(report_text(report.model_copy(update={"cases": []})))
            raise ReportNotWrittenError([(report.run.run_id, exc)]) from None
    print(report_text(report.model_copy(update={"cases": []})))
    if output is not None:
        print(f"report: {printable(output)}", file=sys.stderr)
    return 0


@guarded()
def cmd_predictions(args: argparse.Namespace) -> int:
    output = Path(args.output)
    check_writable(output)
    found = service.answer_predictions(get_engine(), args.run_id)
    write_atomic(output, predictions_json(found), parents=True)
    print(f"{len(found)} predictions: {printable(output)}", file=sys.stderr)
    return 0


@guarded()
def cmd_runs(args: argparse.Namespace) -> int:
    runs = service.list_answer_runs(get_engine(), dataset=args.dataset, knowledge_base=args.knowledge_base,
                                    answerer=args.answerer, limit=args.limit)
    if args.format == "json":
        _print_json(runs.model_dump(mode="json"))
    else:
        print(runs_text(runs))
    return 0


@guarded()
def cmd_show(args: argparse.Namespace) -> int:
    report = service.get_answer_run(get_engine(), args.run_id, verdict=args.verdict, sort=args.sort,
                                    wrong_but_confident=args.wrong_but_confident)
    if args.format == "json":
        _print_json(report.model_dump(mode="json"))
    else:
        print(report_text(report))
    return 0


@guarded()
def cmd_compare(args: argparse.Namespace) -> int:
    from rag_pipeline.service.answer_comparison import compare_answer_runs  # noqa: PLC0415 - numpy, statistics

    comparison = compare_answer_runs(get_engine(), args.run_a, args.run_b)
    if args.format == "json":
        _print_json(comparison.model_dump(mode="json"))
    else:
        print(comparison_text(comparison))
    return 0


def _print_json(obj) -> None:
    from rag_pipeline.cli.output import print_json  # noqa: PLC0415 - its report models only for --format json

    print_json(obj)


RUN_HELP = "an answer run id, or a unique prefix of one (at least 4 hex digits, as `answers runs` prints it)"


def _format(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=["text", "json"], default="text", help="text (default) or json")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``answers`` group (``evaluate``, ``runs``, ``show``, ``compare``, ``collect``)."""
    group = sub.add_parser("answers",
        description="Score a RAG system's answers against a labelled dataset, read and compare "
                    "the stored answer runs, collect answers (docs/design.md §12).")
    answers = group.add_subparsers(dest="answers_command", required=True)

    p = answers.add_parser("evaluate", help="score an answers file against a dataset, store the run, print the "
                                            "summary")
    p.add_argument("--knowledge-base", required=True, help="knowledge base name or id")
    p.add_argument("--dataset", required=True, help="dataset file (or a SQuAD v2.0 / CMRC 2018 file), a name in "
                                                    "the datasets folder, or a stored dataset's name (its latest "
                                                    "version)")
    p.add_argument("--answers", required=True, help="answers file (JSON Lines, one object per case; "
                                                    "schemas/answers-v1.json), or an official prediction "
                                                    "file {question id: answer}")
    p.add_argument("--answerer", metavar="NAME", help="who answered: NAME or NAME@VERSION (default: the file's "
                                                      "own, else unnamed)")
    p.add_argument("--output", metavar="REPORT", help="write the report JSON (summary and cases) to this file")
    p.add_argument("--no-store", action="store_true", help="score only; store no run")
    p.add_argument("--f1-threshold", type=F1_THRESHOLD, metavar="X",
                   help="f1 at or above which an answer counts as correct (0..1, default 0.8)")
    p.add_argument("--refusal-phrases", metavar="FILE",
                   help="phrases that mark a refusal, one a line (default: the documented zh/en list)")
    p.add_argument("--convention", choices=ANSWER_CONVENTIONS,
                   help="answer convention: squad, cmrc or auto (per reference); default: the dataset's own, else "
                        "from the knowledge base's text mode (chinese: cmrc, english: squad, others: auto)")
    p.add_argument("--judge-url", metavar="URL", help="optional LLM judge: an OpenAI-compatible chat API base URL "
                                                      f"(bearer token from {JUDGE_KEY_VARIABLE})")
    p.add_argument("--judge-model", metavar="MODEL", help="the judge's model name")
    p.add_argument("--judge-repeats", type=JUDGE_REPEATS, metavar="N",
                   help="times each judge prompt is asked (1..20, default 1; mean and spread reported)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_evaluate)

    p = answers.add_parser("runs", help="answer run history (newest first)")
    p.add_argument("--dataset", help="dataset name")
    p.add_argument("--answerer", help="answerer name")
    p.add_argument("--knowledge-base", help="knowledge base name or id")
    p.add_argument("--limit", type=arguments.int_between(1, 10_000), default=100,
                   help="at most this many runs (1..10000, default 100)")
    _format(p)
    p.set_defaults(func=cmd_runs)

    p = answers.add_parser("show", help="one answer run: summary, then every case with its citations")
    p.add_argument("run_id", metavar="RUN", help=RUN_HELP)
    p.add_argument("--verdict", choices=VERDICTS, help="only the cases of this verdict")
    p.add_argument("--sort", choices=SORT_CHOICES, metavar="METRIC",
                   help="sort the cases by an answer metric (ascending; --sort=-METRIC descending; undefined last)")
    p.add_argument("--wrong-but-confident", action="store_true",
                   help="only wrong answers that cite a chunk or are lexically supported (docs/design.md §12.6)")
    _format(p)
    p.set_defaults(func=cmd_show)

    p = answers.add_parser("compare", help="two answer runs case by case: paired statistics, verdict changes")
    p.add_argument("run_a", metavar="RUN_A", help=RUN_HELP)
    p.add_argument("run_b", metavar="RUN_B", help="the run compared with RUN_A (delta = B - A)")
    _format(p)
    p.set_defaults(func=cmd_compare)

    p = answers.add_parser("predictions", help="write a run's answers as an official prediction file "
                                               "({question id: answer}, a refusal \"\")")
    p.add_argument("run_id", metavar="RUN", help=RUN_HELP)
    p.add_argument("--output", required=True, metavar="FILE", help="the prediction file (JSON) to write")
    p.set_defaults(func=cmd_predictions)

    add_collect_parser(answers)
    for command in answers.choices.values():
        command.epilog = command.epilog or EXIT_CODES_HELP
