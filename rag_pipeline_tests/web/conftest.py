"""Fixtures of the web tests: ``live_server`` (a real ``rag-pipeline serve`` on a free port, with a real Dagster
daemon on a temporary DAGSTER_HOME) and ``demo_kb`` (the demo knowledge base ingested)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag_pipeline_tests.web.server_helpers import ROOT, dagster_env, start_daemon, start_server

DEMO_KB = "demo"
DEMO_DATASET = ROOT / "datasets" / "demo.json"


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


@pytest.fixture(scope="session")
def demo_kb(engine) -> str:
    """The demo knowledge base (``demo/kb``, text mode chinese, USE embeddings) ingested; returns its name, the
    one ``datasets/demo.json`` labels."""
    from rag_pipeline.evaluation.datasets import demo as demo_dataset
    from rag_pipeline.service.knowledge_bases import ingest

    ingest(engine, ROOT / "demo" / "kb", DEMO_KB, text_search=demo_dataset.DEMO_TEXT_SEARCH,
           chunk_size=demo_dataset.DEMO_CHUNK_SIZE, chunk_overlap=demo_dataset.DEMO_CHUNK_OVERLAP)
    return DEMO_KB
