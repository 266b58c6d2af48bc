"""The package's logged warnings and errors on the command line: one ``rag-pipeline: warning: ...`` line each on
stderr, as :func:`rag_pipeline.cli.output.print_warnings` writes them (a light module: every command loads it)."""

from __future__ import annotations

import logging
import sys


class _LogLines(logging.Handler):
    """The package's logged warnings and errors (a leg over the memory budget, an index too large to keep on disk)
    as ``print_warnings`` writes: one ``rag-pipeline: warning: ...`` line on stderr, above the progress bars
    (``tqdm.write``), never inside one; the message only, no traceback."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm  # noqa: PLC0415 - as the bars do

        tqdm.write(f"rag-pipeline: {record.levelname.lower()}: {record.getMessage()}", file=sys.stderr)


def show_logged_warnings() -> None:
    """Route the ``rag_pipeline`` loggers' warnings to :class:`_LogLines` (once per process)."""
    logger = logging.getLogger("rag_pipeline")
    if not any(isinstance(h, _LogLines) for h in logger.handlers):
        logger.addHandler(_LogLines())
