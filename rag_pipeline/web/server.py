"""Running the HTTP service under uvicorn (``rag-pipeline serve``): the bind check, the database and Dagster set-up
before the first request, and an optional Dagster daemon next to it."""

from __future__ import annotations

import logging
import sys

import uvicorn

from rag_pipeline.service.database import get_engine
from rag_pipeline.settings import load_env_file, project_root
from rag_pipeline.web.security import BindRefused, check_bind

log = logging.getLogger("rag_pipeline.web")


class ServeRefused(ValueError):
    """Why ``serve`` does not start (a non-loopback address without a token, no Dagster instance)."""


def serve(host: str = "127.0.0.1", port: int = 8000, *, with_daemon: bool = False) -> int:
    """Serve the API and console on ``host:port`` until interrupted. Refuses a non-loopback ``host`` without
    ``RAG_API_TOKEN``; migrates the database and opens the Dagster instance first (errors before listening);
    ``with_daemon``: start a Dagster daemon when none is alive on the instance (stopped on exit)."""
    try:
        check_bind(host)  # before Dagster is even imported: a refusal is immediate
    except BindRefused as exc:
        raise ServeRefused(str(exc)) from None
    from rag_pipeline.web import launcher  # noqa: PLC0415 - loads Dagster

    load_env_file(project_root())  # DAGSTER_HOME, RAG_DAGSTER_PG_URL of `rag-pipeline db start`
    get_engine()
    try:
        launcher.prepare_environment()
        launcher.instance()
    except launcher.LaunchError as exc:
        raise ServeRefused(str(exc)) from None
    daemon = None
    status = launcher.queue_status(max_age_s=0)
    if with_daemon and not status.daemon_running:
        daemon = launcher.start_daemon()
        print(f"rag-pipeline: started a Dagster daemon (pid {daemon.pid}) on DAGSTER_HOME={launcher.dagster_home()}",
              file=sys.stderr)
    elif with_daemon:
        print("rag-pipeline: a Dagster daemon is already running on this instance; not starting another",
              file=sys.stderr)
    elif not status.daemon_running:
        print(f"rag-pipeline: warning: {status.message}", file=sys.stderr)
    base = f"http://{host if ':' not in host else f'[{host}]'}:{port}"
    print(f"rag-pipeline: API {base}/api/v1 (OpenAPI {base}/docs), console {base}/admin/retrieval-evaluations",
          file=sys.stderr, flush=True)
    try:
        uvicorn.run("rag_pipeline.web.app:create_app", factory=True, host=host, port=port, log_level="info",
                    server_header=False, proxy_headers=False, access_log=True)
    finally:
        if daemon is not None:
            daemon.terminate()
            try:
                daemon.wait(timeout=30)
            except Exception:  # noqa: BLE001 - it is going away either way
                daemon.kill()
    return 0
