"""``rag-pipeline``: measure RAG retrieval quality on PostgreSQL + pgvector (no Dagster daemon needed).

Every command honours the ``RAG_*`` settings (:mod:`rag_pipeline.settings`): ``RAG_DATABASE_URL`` (any
PostgreSQL with pgvector), else the embedded server in ``RAG_PGDATA``.
User errors print one line ``rag-pipeline: error: ...`` and exit 2.
"""

from __future__ import annotations

import argparse
import sys

from rag_pipeline.cli import database, diagnose, evaluate, knowledge_bases, tune
from rag_pipeline.cli.errors import EXIT_CODES_HELP

DESCRIPTION = "Measure RAG retrieval quality on PostgreSQL + pgvector (no Dagster daemon needed)."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rag-pipeline", description=DESCRIPTION, epilog=EXIT_CODES_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (database, knowledge_bases, evaluate, diagnose, tune):
        group.register(sub)
    for command in sub.choices.values():
        command.epilog = command.epilog or EXIT_CODES_HELP
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)  # every command is wrapped by rag_pipeline.cli.errors.guarded


if __name__ == "__main__":
    sys.exit(main())
