"""Fixtures of the in-process route tests: the app under FastAPI's ``TestClient`` (no server process, no Dagster
daemon) on the session's database, a small evaluated knowledge base, and :class:`RecordingLauncher`.

:class:`RecordingLauncher` is the app's real :class:`~rag_pipeline.web.launcher.Launcher` with only Dagster
replaced: :class:`FakeDagsterInstance` stands in for the Dagster instance (dynamic partitions, daemon heartbeat,
run records) and ``dagster job launch`` is recorded instead of run. Everything of ours — queueing the run rows,
the queue status, reconciliation — runs for real.

:func:`covers` names the route(s) a test exercises; ``test_route_coverage.py`` checks that every route of the app
is named by some test, and the ``client`` fixture checks that a test requested every route it names.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient

from rag_pipeline.service import evaluations, stored_datasets
from rag_pipeline.web.app import create_app
from rag_pipeline.web.launcher import DAEMON_TYPE, Launcher
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


class FakeDagsterInstance:
    """Stands in for ``dagster.DagsterInstance``: the five calls the launcher makes."""

    def __init__(self):
        self.partitions: set[tuple[str, str]] = set()
        self.daemon_alive = True
        self.run_status: dict[str, str] = {}  # Dagster run id → DagsterRunStatus name
        self.failures: dict[str, str] = {}  # Dagster run id → the message of its step failure's error

    def has_dynamic_partition(self, name: str, key: str) -> bool:
        return (name, key) in self.partitions

    def add_dynamic_partitions(self, name: str, keys: list[str]) -> None:
        self.partitions.update((name, key) for key in keys)

    def get_daemon_heartbeats(self) -> dict:
        return {DAEMON_TYPE: SimpleNamespace(timestamp=time.time())} if self.daemon_alive else {}

    def all_logs(self, run_id: str, of_type=None) -> list:
        """A failed step's event as Dagster logs it: its error wraps ours (``cause``)."""
        if run_id not in self.failures:
            return []
        ours = SimpleNamespace(message=self.failures[run_id], cause=None)
        wrapper = SimpleNamespace(message="dagster._core.errors.DagsterExecutionStepExecutionError: Error occurred "
                                          "while executing op \"evaluation_run\":", cause=ours)
        return [SimpleNamespace(dagster_event=SimpleNamespace(event_specific_data=SimpleNamespace(error=wrapper)))]

    def get_runs(self, filters) -> list:
        return [SimpleNamespace(run_id=i, status=SimpleNamespace(name=s)) for i, s in self.run_status.items()
                if i in filters.run_ids]


class RecordingLauncher(Launcher):
    """The app's launcher on :class:`FakeDagsterInstance`, recording each submitted run instead of
    queueing a Dagster run."""

    def __init__(self, dagster_home: Path):
        super().__init__({"DAGSTER_HOME": str(dagster_home)})
        self.dagster = FakeDagsterInstance()
        self.submitted: list = []

    def instance(self):
        return self.dagster

    def _submit(self, runs) -> None:
        self.submitted.extend(runs)

    def set_daemon(self, *, alive: bool) -> None:
        self.dagster.daemon_alive = alive
        self._status = None  # no cached queue status

    def wait_for_submissions(self, count: int, timeout: float = 30) -> list:
        deadline = time.monotonic() + timeout
        while len(self.submitted) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.submitted


@pytest.fixture(scope="package")
def launcher(tmp_path_factory) -> RecordingLauncher:
    return RecordingLauncher(tmp_path_factory.mktemp("dagster_home"))


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
def app(launcher):
    app = create_app(launcher=launcher)
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
