"""``rag-pipeline answers collect``: a dataset's answers into an answers file (docs/answers-collection.md)."""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError

from rag_pipeline.cli import arguments
from rag_pipeline.cli.errors import error, guarded
from rag_pipeline.contracts.answers import DEFAULT_REQUEST_TEMPLATE, CollectionProgress, EndpointConfig
from rag_pipeline.contracts.errors import BadInputError

CONCURRENCY = arguments.int_between(1, 256)
RETRIES = arguments.int_between(0, 20)
TIMEOUT = arguments.finite_float(0.0, 3600.0, exclusive=True)
EXIT_FAILED = 1


class FlagError(BadInputError, ValueError):
    """Flags that do not fit together."""


def _endpoint(args: argparse.Namespace) -> EndpointConfig | None:
    if args.endpoint is None:
        for flag in ("method", "request_template", "answer_path", "citations_path", "contexts_path", "header",
                     "concurrency", "timeout", "retries"):
            if getattr(args, flag) not in (None, []):
                raise FlagError(f"--{flag.replace('_', '-')} needs --endpoint")
        return None
    given = {"method": args.method, "request_template": args.request_template, "answer_path": args.answer_path,
             "citations_path": args.citations_path, "contexts_path": args.contexts_path,
             "concurrency": args.concurrency, "timeout_s": args.timeout, "retries": args.retries}
    try:
        return EndpointConfig(url=args.endpoint, headers=tuple(args.header or ()),
                              **{k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise FlagError(f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}") from None


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}ms"


def _progress_bar(quiet: bool):
    from tqdm import tqdm  # noqa: PLC0415 - as cli.output does

    bar: list[tqdm] = []

    def progress(p: CollectionProgress) -> None:
        if not bar:
            bar.append(tqdm(total=p.total, desc="answers", unit="case", file=sys.stderr, disable=quiet))
        b = bar[0]
        b.update(p.done - b.n)
        b.set_postfix_str(f"errors {p.errors / max(p.done - p.skipped_existing, 1):.0%} p50 {_ms(p.latency_ms_p50)} "
                          f"p95 {_ms(p.latency_ms_p95)}", refresh=False)

    def close() -> None:
        if bar:
            bar[0].close()

    return progress, close


@guarded()
def cmd_collect(args: argparse.Namespace) -> int:
    from rag_pipeline.service.answer_collection import collect_answers  # noqa: PLC0415 - only this command needs it

    endpoint = _endpoint(args)
    if endpoint is not None and args.strategy is not None:
        raise FlagError("--strategy is for --answerer (an endpoint retrieves by itself)")
    progress, close = _progress_bar(args.quiet)
    try:
        result = collect_answers(args.dataset, args.output, endpoint=endpoint, answerer=args.answerer,
                                 knowledge_base=args.knowledge_base, strategy=args.strategy, progress=progress)
    finally:
        close()
    from rag_pipeline.cli.output import print_json  # noqa: PLC0415 - with the collection service

    print_json(result.model_dump())
    if result.status == "failed":
        error(f"collection failed: {result.reason} ({result.answered + result.skipped_existing} of "
              f"{result.total} cases answered are kept in {result.output}; run again to resume)")
        return EXIT_FAILED
    return 0


def add_collect_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``collect`` to the ``answers`` sub-commands (``subparsers`` of the ``answers`` group)."""
    p = subparsers.add_parser("collect", help="collect a dataset's answers from a RAG endpoint or an answerer "
                                              "into an answers file (JSON Lines, resumable)")
    p.add_argument("--dataset", required=True, help="dataset JSON file, or the name of one in the datasets "
                                                    "folder (demo = datasets/demo.json)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--endpoint", metavar="URL", help="the RAG system's HTTP endpoint (http:// or https://)")
    source.add_argument("--answerer", metavar="NAME", help="an in-process answerer, e.g. extractive-v1")
    p.add_argument("--output", required=True, help="answers file (JSON Lines); an existing one is resumed")
    p.add_argument("--method", choices=["POST", "PUT", "GET"], help="HTTP method (default POST; GET sends no body)")
    p.add_argument("--request-template", metavar="JSON",
                   help=f"request body; {{question}} {{case_id}} {{k}} are filled in its string values, "
                        f"\"{{k}}\" alone becomes the number (default {DEFAULT_REQUEST_TEMPLATE})")
    p.add_argument("--answer-path", metavar="PATH", help="where the answer is in the reply (default answer)")
    p.add_argument("--citations-path", metavar="PATH",
                   help="the cited chunk ids in the reply (default citations; e.g. citations[*].chunk_id)")
    p.add_argument("--contexts-path", metavar="PATH",
                   help="the retrieved chunk ids in the reply (default contexts)")
    p.add_argument("--header", action="append", metavar="'Name: value'",
                   help="request header, repeatable; a value env:VAR is read from the environment and never "
                        "printed or stored")
    p.add_argument("--concurrency", type=CONCURRENCY, help="cases in flight at once (1..256, default 4)")
    p.add_argument("--timeout", type=TIMEOUT, help="seconds for one whole request, body included (default 30)")
    p.add_argument("--retries", type=RETRIES, help="retries on 429 / 5xx / timeout / connection error "
                                                   "(0..20, default 3)")
    p.add_argument("--knowledge-base", help="knowledge base name (if the dataset file does not name it)")
    p.add_argument("--strategy", metavar="VERSION", help="with --answerer: the retrieval strategy it uses")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_collect)
    return p
