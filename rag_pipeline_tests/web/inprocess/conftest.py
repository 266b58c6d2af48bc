"""Fixtures of the in-process route tests: the app under FastAPI's ``TestClient`` (no server process, no Dagster
daemon) on the session's database, a small evaluated knowledge base, and :class:`Daemon`: what the Dagster daemon
does for the app — ticking the real ``queued_evaluations`` sensor on an ephemeral Dagster instance.

:func:`covers` names the route(s) a test exercises; ``test_route_coverage.py`` checks that every route of the app
is named by some test, and the ``client`` fixture checks that a test requested every route it names.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient

from rag_pipeline.service import evaluations, queued_runs, stored_datasets
from rag_pipeline.storage.engine import get_engine
from rag_pipeline.web.app import create_app
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, tiny_cases

DATASET = "inproc"
STRATEGIES = ("hybrid-v1", "keyword-v1")
ROUTES_ATTR = "covered_routes"


def covers(*routes: str) -> Callable:
    """Mark a test as the in-process test of routes given as ``"METHOD /path/{param}"``."""
    def mark(test: Callable) -> Callable:
        setattr(test, ROUTES_ATTR, (*getattr(test, ROUTES_ATTR, ()), *routes))
        return test
    return mark


def app_routes(app) -> set[str]:
    """Every route of ``app`` as ``"METHOD /path"`` (HEAD, which Starlette adds to each GET, left out)."""
    return {f"{method} {ctx.path}" for ctx in iter_route_contexts(app.routes) for method in ctx.methods or ()
            if method != "HEAD"}


class Daemon:
    """Stands in for the Dagster daemon: :meth:`tick` runs the ``queued_evaluations`` sensor on an ephemeral
    Dagster instance (Dagster imported only then); :meth:`set_daemon` makes its last tick fresh or an hour old."""

    def __init__(self):
        self.instance = None

    def tick(self):
        import dagster as dg

        from rag_pipeline.defs.resources import RagDatabase
        from rag_pipeline.defs.sensors import queued_evaluations

        self.instance = self.instance or dg.DagsterInstance.ephemeral()
        return queued_evaluations(dg.build_sensor_context(instance=self.instance, resources={"rag_db": RagDatabase()}))

    def set_daemon(self, *, alive: bool) -> None:
        queued_runs.record_tick(get_engine())
        if not alive:
            with get_engine().begin() as conn:
                conn.execute(sa.text("UPDATE dagster_sensor_ticks SET ticked_at = now() - interval '1 hour'"))


@pytest.fixture(scope="package")
def daemon(engine) -> Daemon:  # the sensor's ticks are rows of the session's database: its tests are marked `db`
    alive = Daemon()
    alive.set_daemon(alive=True)
    return alive


class RouteRecorder:
    """ASGI middleware: the route (``"METHOD /path"``, as :func:`app_routes` names it) of every request."""

    def __init__(self, asgi, routes: dict[int, str], requested: set[str]):
        self.asgi, self.routes, self.requested = asgi, routes, requested

    async def __call__(self, scope, receive, send):
        await self.asgi(scope, receive, send)
        if scope["type"] == "http" and scope["method"] != "HEAD":
            route = scope.get("route")  # set by FastAPI's routes; Starlette's (/docs, /openapi.json) have none
            path = self.routes.get(id(route)) if route is not None else scope["path"]
            self.requested.add(f"{scope['method']} {path}")


@pytest.fixture(scope="package")
def app(daemon):
    app = create_app()
    routes = {id(ctx.original_route): ctx.path for ctx in iter_route_contexts(app.routes)}
    app.state.requested_routes = set()
    app.add_middleware(RouteRecorder, routes=routes, requested=app.state.requested_routes)
    return app


@pytest.fixture(scope="package")
def _client(app, engine):
    with TestClient(app, base_url="http://localhost") as client:  # a loopback Host; runs the lifespan
        yield client


@pytest.fixture
def client(_client, app, request):
    """The ``TestClient`` (cookies cleared); after the test: every route the test :func:`covers` was requested."""
    app.state.requested_routes.clear()
    _client.cookies.clear()
    yield _client
    missing = set(getattr(request.function, ROUTES_ATTR, ())) - app.state.requested_routes
    assert not missing, f"{request.node.name} covers routes it never requested: {sorted(missing)}"


@pytest.fixture(scope="package")
def evaluated(engine, tmp_path_factory) -> dict:
    """A tiny knowledge base whose dataset ``inproc`` is evaluated in-process with two strategies:
    ``{"kb", "chunks", "cases", "dataset_id", "runs": {strategy: summary}}``."""
    kb = f"inproc-{int(time.time() * 1000) % 10**8}"
    folder = tmp_path_factory.mktemp("inproc")
    chunks = ingest_tiny_kb(engine, kb, folder / "docs")
    cases = tiny_cases(chunks)
    path = folder / f"{DATASET}.json"
    path.write_text(json.dumps({"knowledge_base": kb, "name": DATASET, "cases": cases}, ensure_ascii=False),
                    encoding="utf-8")
    outcomes = evaluations.evaluate(engine, evaluations.plan_evaluation(engine, path, STRATEGIES, knowledge_base=kb))
    summaries = evaluations.run_summaries(engine, [str(o.run_id) for o in outcomes])
    dataset = stored_datasets.find_dataset(engine, kb, DATASET, None)
    return {"kb": kb, "chunks": chunks, "cases": cases, "dataset_id": dataset.dataset_id,
            "runs": {s.strategy_version: s.model_dump() for s in summaries}}
