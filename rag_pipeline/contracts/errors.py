"""The one error hierarchy: every error whose message is meant for the user is a :class:`RagError` of one kind.

Each exception class subclasses its kind where it is defined (keeping its own base, e.g. ``ValueError``); the
front ends map the kind, never a list of classes:

| kind | CLI exit | HTTP |
|---|---|---|
| :class:`BadInputError` (also :class:`~rag_pipeline.settings.SettingsError`) | 2 | 422 |
| :class:`NotFoundError` | 2 | 404 |
| :class:`NotFoundOrInvalidError` | 2 | 404 if nothing of that name exists (``unknown …``/``no …``), else 422 |
| :class:`ConflictError` | 2 | 409 |
| :class:`DatabaseUnavailableError`, and SQLAlchemy's ``DBAPIError`` in the middle of the work | 3 | 503 |
| :class:`CheckFailed` | 1 | 422 |
| :class:`~rag_pipeline.storage.files.FileWriteError` (an output file not written: a full disk) | 73 | 500 |
| anything else: a bug | 70 | 500 |

One exception to the exit codes: a database that cannot be reached at start is a configuration pointing nowhere
(``DatabaseUnreachableError``: exit 2, HTTP 503)."""

from __future__ import annotations

from rag_pipeline.settings import SettingsError

EXIT_CHECK_FAILED, EXIT_USER_ERROR, EXIT_DATABASE_ERROR, EXIT_INTERNAL_ERROR = 1, 2, 3, 70
EXIT_OUTPUT_NOT_WRITTEN = 73  # sysexits' EX_CANTCREAT: the work is done (a run stored), its output file is not


class RagError(Exception):
    """An error the user can act on: the front ends show its message, never a traceback."""

    exit_code = EXIT_USER_ERROR
    http_status = 422


class BadInputError(RagError):
    """Invalid input or configuration: a file, a name, a value, a dataset, a strategy."""


class NotFoundError(RagError):
    """Nothing of that name or id exists."""

    http_status = 404


class NotFoundOrInvalidError(RagError):
    """A lookup that failed: 404 when nothing of that name exists (the message starts ``unknown`` or ``no``),
    422 when the thing exists but does not fit (e.g. a knowledge base built with other settings)."""

    @property
    def http_status(self) -> int:  # type: ignore[override]
        return 404 if str(self).startswith(("unknown ", "no ")) else 422


class ConflictError(RagError):
    """The request contradicts what is stored: a strategy version with other parameters, an ambiguous id."""

    http_status = 409


class DatabaseUnavailableError(RagError):
    """The database does not answer."""

    exit_code = EXIT_DATABASE_ERROR
    http_status = 503


class CheckFailed(RagError):  # noqa: N818 - it is a result, not a crash
    """A check ran and found a problem (exit 1): nothing is wrong with the input, the measurement says no."""

    exit_code = EXIT_CHECK_FAILED


USER_ERRORS: tuple[type[Exception], ...] = (RagError, SettingsError)
"""Every error whose message tells the user what to fix or what a check found."""


def exit_code(exc: BaseException) -> int:
    """The CLI exit code of an error: its kind's, 2 for a settings error or other bad input the CLI accepts."""
    return exc.exit_code if isinstance(exc, RagError) else EXIT_USER_ERROR


def http_status(exc: BaseException) -> int:
    """The HTTP status of a user error: its kind's, 422 for a settings error."""
    return exc.http_status if isinstance(exc, RagError) else 422
