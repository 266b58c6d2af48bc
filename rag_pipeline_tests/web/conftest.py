"""Fixtures of the web tests: ``live_server`` (a real ``rag-pipeline serve`` on a free port, with a real Dagster
daemon on a temporary DAGSTER_HOME), ``browser`` (Debian's Chromium, headless, driven by Playwright) and ``shots``
(a screenshot folder); the demo knowledge base is the root conftest's ``demo_kb``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rag_pipeline_tests.web.server_helpers import ROOT, dagster_env, start_daemon, start_server

DEMO_DATASET = ROOT / "datasets" / "demo.json"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="session")
def web_home(engine, tmp_path_factory) -> Path:
    """A temporary folder holding ``dagster_home/`` (the Dagster instance), ``datasets/`` and the logs."""
    return tmp_path_factory.mktemp("web")


@pytest.fixture(scope="session")
def web_env(web_home) -> dict[str, str]:
    """The environment of the server and daemon processes (database, DAGSTER_HOME, datasets folder)."""
    return dagster_env(web_home / "dagster_home", web_home / "datasets")


@pytest.fixture(scope="session")
def dagster_daemon(web_env, web_home):
    """A ``dagster-daemon run`` process on the web tests' instance, heartbeating."""
    with start_daemon(web_env, log=web_home / "daemon.log") as proc:
        yield proc


@pytest.fixture(scope="session")
def live_server(web_env, web_home, dagster_daemon) -> str:
    """Base URL (``http://127.0.0.1:<port>``) of a real ``rag-pipeline serve`` (uvicorn) on the session's
    database, submitting evaluations to a Dagster instance in a temporary DAGSTER_HOME whose daemon runs."""
    with start_server(web_env, log=web_home / "server.log") as (base, _proc):
        yield base


@pytest.fixture(scope="module")  # not longer: Playwright's sync API marks its event loop running until it stops
def browser():
    """Debian's Chromium (``/usr/bin/chromium``; nothing is downloaded), headless, driven by Playwright: skipped
    without it, failed under CI (``.ci/run`` installs it)."""
    from playwright import sync_api as playwright_api

    if not Path(CHROMIUM).exists():
        message = f"{CHROMIUM} is missing: install Debian's chromium (`.ci/chromium`, which `make test` runs)"
        if os.environ.get("CI"):  # .ci/run installs it: a CI machine without it is a broken set-up
            pytest.fail(message)
        pytest.skip(message)
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def shots(request, tmp_path_factory) -> Path:
    """The folder (printed) of the module's screenshots: ``<the module's SCREENSHOTS>`` in pytest's temporary
    directory."""
    folder = tmp_path_factory.mktemp(request.module.SCREENSHOTS)
    print(f"console screenshots: {folder}")
    return folder
