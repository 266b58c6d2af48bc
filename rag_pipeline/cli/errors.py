"""How every command reports failure: one line on stderr, never a traceback, and an exit code."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable

import sqlalchemy as sa

from rag_pipeline.contracts.errors import (
    EXIT_DATABASE_ERROR,
    EXIT_INTERNAL_ERROR,
    EXIT_OUTPUT_NOT_WRITTEN,
    USER_ERRORS,
    RagError,
    exit_code,
)
from rag_pipeline.settings import SettingsError, get_settings
from rag_pipeline.storage.names import printable
from rag_pipeline.storage.urls import mask_secrets

Command = Callable[[argparse.Namespace], int]
EXIT_OK = 0
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143  # 128 + SIGINT, 128 + SIGTERM


class ReportNotWrittenError(RagError):
    """Runs were stored but their report files could not be written (exit 73), a line per report."""

    exit_code = EXIT_OUTPUT_NOT_WRITTEN

    def __init__(self, failures: list[tuple[str, RagError]]):
        self.failures = failures
        super().__init__("\n".join(f"stored as run {run_id}; report not written: {exc}" for run_id, exc in failures))


def error(message: object) -> None:
    """One message on stderr: secrets masked, control characters escaped (a name holding ``ESC[2J`` cannot
    clear the terminal); the line breaks of a multi-line message (a dataset's problem list) are kept."""
    print(f"rag-pipeline: error: {printable(mask_secrets(str(message)), keep=chr(10))}", file=sys.stderr)


def _debug() -> bool:
    try:
        return get_settings().debug
    except SettingsError:
        return False


class Terminated(KeyboardInterrupt):  # named after the signal, like KeyboardInterrupt
    """Raised in the main thread by the SIGTERM handler of :func:`rag_pipeline.cli.main.main`: unwinds like
    Ctrl-C (psycopg cancels the running statement, a running evaluation is marked failed at once) → exit 143."""


def _quiet_stdout() -> None:
    """stdout's reader went away (``| head``): the rest goes to /dev/null, no ``Broken pipe`` report."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (a test's capture): nothing to redirect
        pass


def guarded(*extra_user_errors: type[BaseException]) -> Callable[[Command], Command]:
    """Decorator for a command: a user error → its message and its kind's exit code (2 by default)."""
    user_errors: tuple[type[BaseException], ...] = (*USER_ERRORS, OSError, *extra_user_errors)

    def decorate(func: Command) -> Command:
        @functools.wraps(func)
        def wrapper(args: argparse.Namespace) -> int:
            try:
                code = func(args)
                sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
                return code
            except BrokenPipeError:  # before OSError (a user error): nobody reads stdout any more
                _quiet_stdout()
                return EXIT_OK
            except user_errors as exc:
                error(exc)
                return exit_code(exc)
            except sa.exc.DBAPIError as exc:
                first = str(getattr(exc, "orig", None) or exc).strip().splitlines() or [type(exc).__name__]
                error(f"database error: {first[0]}")
                return EXIT_DATABASE_ERROR
            except Terminated:
                print("rag-pipeline: terminated", file=sys.stderr)
                return EXIT_TERMINATED
            except KeyboardInterrupt:
                print("rag-pipeline: interrupted", file=sys.stderr)
                return EXIT_INTERRUPTED
            except Exception as exc:  # a bug: still one line, the traceback only on request
                if _debug():
                    raise
                error(f"unexpected {type(exc).__name__}: {exc} (set RAG_DEBUG=1 for the traceback)")
                return EXIT_INTERNAL_ERROR

        return wrapper

    return decorate
