"""``rag-pipeline``: measure RAG retrieval quality on PostgreSQL + pgvector (no Dagster daemon needed). Every command
is wrapped by :func:`rag_pipeline.cli.errors.guarded`; SIGTERM is handled like Ctrl-C."""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading
from collections.abc import Iterator

from rag_pipeline.cli import (
    check_dataset,
    compare,
    database,
    doctor,
    evaluate,
    knowledge_bases,
    labelling,
    serve,
    trec,
    tune,
)
from rag_pipeline.cli.answers import commands as answers
from rag_pipeline.cli.errors import EXIT_CODES_HELP, Terminated
from rag_pipeline.storage import embedded_server

DESCRIPTION = "Measure RAG retrieval quality on PostgreSQL + pgvector (no Dagster daemon needed)."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rag-pipeline", description=DESCRIPTION, epilog=EXIT_CODES_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (database, knowledge_bases, labelling, evaluate, check_dataset, compare, tune, trec, answers, serve,
                  doctor):
        group.register(sub)
    for command in sub.choices.values():
        command.epilog = command.epilog or EXIT_CODES_HELP
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if database.announce_boot not in embedded_server.BOOT_HOOKS:
        embedded_server.BOOT_HOOKS.append(database.announce_boot)
    with sigterm_as_terminated():
        return args.func(args)  # every command is wrapped by rag_pipeline.cli.errors.guarded


@contextlib.contextmanager
def sigterm_as_terminated() -> Iterator[None]:
    """While the command runs, SIGTERM raises :class:`Terminated` in the main thread (once: a second SIGTERM
    during the cleanup is ignored, so marking the run failed is not cut short). The previous handler is
    restored afterwards (``main`` is also called in-process, by tests). Outside the main thread: no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = False

    def terminate(signum, _frame) -> None:  # the signal handler signature
        nonlocal received
        if not received:
            received = True
            raise Terminated(f"terminated by signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
