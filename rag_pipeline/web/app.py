"""The FastAPI application: ``create_app()`` (what ``rag-pipeline serve`` runs under uvicorn): the API under
``/api/v1`` (OpenAPI at ``/docs``), the admin console under ``/admin``, ``/healthz``."""

from __future__ import annotations

import logging
import subprocess
from importlib import metadata

from fastapi import APIRouter, Depends, FastAPI
from fastapi.responses import RedirectResponse
from fastapi_offline import FastAPIOffline
from starlette.middleware.sessions import SessionMiddleware

from rag_pipeline.web import hosts, problems, request_rules, security
from rag_pipeline.web.api import answers, chunks, comparisons, datasets, evaluations, health, knowledge_bases

DESCRIPTION = """Measure a RAG system's retrieval: upload labelled datasets, evaluate strategies asynchronously
(each request is one Dagster run of `evaluate_strategies`), read run history, per-case candidates and comparisons.

`{id}` in a path is a knowledge base's UUID or name; a run id may be shortened to a unique prefix of at least
4 hex digits. Errors are RFC 9457 problem details (`application/problem+json`) with the CLI's messages. When
the server has `RAG_API_TOKEN`, every call needs `Authorization: Bearer <token>`."""

TAGS = [
    {"name": "knowledge bases", "description": "Knowledge bases with their counts, models and applicable strategies."},
    {"name": "datasets", "description": "Labelled evaluation datasets (docs/design.md §2), validated like the files."},
    {"name": "evaluations", "description": "Evaluation runs (docs/design.md §6.2): launch, history, per-case detail."},
    {"name": "comparisons", "description": "Strategies compared with a baseline: significance and regression gate."},
    {"name": "answers", "description": "Answer runs (docs/design.md §12): score answers files, history, compare, "
                                       "collect from a RAG endpoint."},
    {"name": "health", "description": "Liveness."},
]


def _version() -> str:
    try:
        return metadata.version("rag_pipeline")
    except metadata.PackageNotFoundError:  # a source checkout that is not installed
        return "0+unknown"


log = logging.getLogger("rag_pipeline.web")
DOCS_STATIC = "/docs/static"
"""Where Swagger UI's script and style sheet are served (from the ``fastapi-offline`` package: no CDN)."""


def create_app(daemon: subprocess.Popen | None = None) -> FastAPI:
    """The application; ``daemon``: the Dagster daemon ``serve --with-daemon`` started."""
    app = FastAPIOffline(title="rag_pipeline", version=_version(), description=DESCRIPTION, openapi_tags=TAGS,
                         docs_url="/docs", redoc_url=None, static_url=DOCS_STATIC,
                         dependencies=[Depends(request_rules.reject_nul)])  # Swagger UI's files served from here
    app.state.daemon = daemon
    problems.install(app)
    request_rules.install(app)
    # Starlette types every handler as taking any Exception; this one is registered for LoginRequired only
    app.add_exception_handler(security.LoginRequired, security.login_redirect)  # type: ignore[arg-type]
    app.add_middleware(SessionMiddleware, secret_key=security.session_secret(),
                       session_cookie=security.SESSION_COOKIE, max_age=security.SESSION_MAX_AGE,
                       same_site="strict", https_only=False)
    app.add_middleware(security.CrossSiteGuard)  # refuses a cross-site write before anything else runs
    app.add_middleware(hosts.HostGuard)  # outermost: a Host that is not this server's is refused first

    api = APIRouter(prefix="/api/v1", dependencies=[Depends(security.require_api_user)],
                    responses={**problems.PROBLEM_RESPONSES, **request_rules.BAD_REQUEST})
    for module in (knowledge_bases, datasets, evaluations, comparisons, answers):
        api.include_router(module.router)
    api.include_router(chunks.router)  # GET /knowledge-bases/{id}/chunks (the chunk ids a labeller picks)
    app.include_router(api)
    app.include_router(health.router)
    app.include_router(security.router)

    from rag_pipeline.web.admin import router as admin_router  # noqa: PLC0415 - the console package

    app.include_router(admin_router)  # its pages, and its CSS/JS under /admin/static

    @app.get("/", include_in_schema=False)
    def root():
        return RedirectResponse("/admin/retrieval-evaluations", status_code=307)

    return app
