"""``rag-pipeline serve``: the HTTP API and admin console (access rules: :mod:`rag_pipeline.web.security`)."""

from __future__ import annotations

import argparse

from rag_pipeline.cli.arguments import int_between
from rag_pipeline.cli.errors import error, guarded
from rag_pipeline.contracts.errors import EXIT_USER_ERROR


@guarded()
def cmd_serve(args: argparse.Namespace) -> int:
    from rag_pipeline.web.server import ServeRefused, serve  # noqa: PLC0415 - FastAPI and Dagster for this command only

    try:
        return serve(args.host, args.port, with_daemon=args.with_daemon, expect_daemon=args.expect_daemon)
    except ServeRefused as exc:  # a non-loopback address without a token, no Dagster instance
        error(exc)
        return EXIT_USER_ERROR


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the HTTP API (/api/v1, OpenAPI at /docs) and the admin console "
                                     "(/admin/retrieval-evaluations)",
                       description="Serve the HTTP API and the admin console under uvicorn. Loopback only unless "
                                   "RAG_API_TOKEN is set. Evaluations run as Dagster runs: a Dagster daemon must "
                                   "run on the same DAGSTER_HOME (make dev, or --with-daemon).")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; any other address "
                                                       "needs RAG_API_TOKEN)")
    p.add_argument("--port", type=int_between(1, 65535), default=8000, help="port (default 8000)")
    p.add_argument("--with-daemon", action="store_true", help="start a Dagster daemon next to the server when none "
                                                              "is running on the instance (stopped with the server)")
    p.add_argument("--expect-daemon", action="store_true",
                   help="a Dagster daemon is being started next to the server (make dev's `dagster dev`): wait for "
                        "its heartbeat in the background, and warn only if none is up after 3 minutes")
    p.set_defaults(func=cmd_serve)
