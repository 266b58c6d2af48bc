"""``rag-pipeline``: measure RAG retrieval quality on PostgreSQL + pgvector (no Dagster daemon needed). Every command
is wrapped by :func:`rag_pipeline.cli.errors.guarded`; SIGTERM is handled like Ctrl-C."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
import threading
from collections.abc import Iterator

from rag_pipeline.cli.commands import COMMANDS, EXIT_CODES_HELP

DESCRIPTION = "Measure RAG retrieval quality on PostgreSQL + pgvector (no Dagster daemon needed)."


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser, or only ``command``'s: the listing comes from :data:`COMMANDS`, and only the modules
    whose commands are built are imported."""
    parser = argparse.ArgumentParser(prog="rag-pipeline", description=DESCRIPTION, epilog=EXIT_CODES_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_, summary) in COMMANDS.items():
        sub.add_parser(name, help=summary)
    wanted = COMMANDS.keys() if command is None else COMMANDS.keys() & {command}
    built = argparse.ArgumentParser(prog=parser.prog).add_subparsers()
    for module in dict.fromkeys(COMMANDS[name][0] for name in wanted):
        importlib.import_module(f"rag_pipeline.cli.{module}").register(built)
    for name, command_parser in built.choices.items():
        if name not in COMMANDS:
            raise RuntimeError(f"command {name!r} is registered but not listed in rag_pipeline.cli.commands")
        command_parser.epilog = command_parser.epilog or EXIT_CODES_HELP
        sub.choices[name] = command_parser
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(next((arg for arg in argv if not arg.startswith("-")), "")).parse_args(argv)
    from rag_pipeline.cli import database, log_lines  # noqa: PLC0415 - after the parse: only what the command needs
    from rag_pipeline.storage import embedded_server  # noqa: PLC0415

    log_lines.show_logged_warnings()
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
            from rag_pipeline.cli.errors import Terminated  # noqa: PLC0415 - loaded by then (guarded)

            raise Terminated(f"terminated by signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
