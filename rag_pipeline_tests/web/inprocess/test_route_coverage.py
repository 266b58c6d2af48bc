"""Every route of the app (the API and the console) has an in-process test: the routes named by :func:`covers` in
this package's test modules are exactly the app's routes."""

from __future__ import annotations

import importlib
from pathlib import Path

from rag_pipeline.web.app import create_app
from rag_pipeline_tests.web.inprocess.conftest import ROUTES_ATTR, app_routes


def test_every_route_has_an_in_process_test():
    covered = set()
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        module = importlib.import_module(f"{__package__}.{path.stem}")
        covered.update(r for name, test in vars(module).items() if name.startswith("test_")
                       for r in getattr(test, ROUTES_ATTR, ()))
    routes = app_routes(create_app())
    assert len(routes) >= 30
    assert routes - covered == set(), "routes without an in-process test"
    assert covered - routes == set(), "tests name routes the app does not have"
