"""Running the HTTP service under uvicorn (``rag-pipeline serve``): the bind check, then the app."""

from __future__ import annotations

import subprocess
import sys

import uvicorn

from rag_pipeline.web.hosts import check_allowed_hosts
from rag_pipeline.web.security import BindRefused, check_bind


class ServeRefused(ValueError):  # noqa: N818 - a refusal the user is shown, not a crash
    """Why ``serve`` does not start (a non-loopback address without a token, no Dagster instance)."""


def check(host: str) -> None:
    """Refuse an address this server may not bind (before anything else is loaded: a refusal is immediate)."""
    try:
        check_bind(host)
        check_allowed_hosts()
    except BindRefused as exc:
        raise ServeRefused(str(exc)) from None


def run(host: str, port: int, daemon: subprocess.Popen | None = None) -> None:
    """Serve the API and console on ``host:port`` until interrupted; ``daemon``: the one ``--with-daemon`` started."""
    from rag_pipeline.web.app import create_app  # noqa: PLC0415 - after the bind check (a refusal is immediate)

    base = f"http://{host if ':' not in host else f'[{host}]'}:{port}"
    print(f"rag-pipeline: API {base}/api/v1 (OpenAPI {base}/docs), console {base}/admin/retrieval-evaluations",
          file=sys.stderr, flush=True)
    uvicorn.run(create_app(daemon=daemon), host=host, port=port, log_level="info", server_header=False,
                proxy_headers=False, access_log=True)
