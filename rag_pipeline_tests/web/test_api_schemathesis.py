"""Schemathesis against a real ``rag-pipeline serve`` on a database of its own: every operation of the OpenAPI
schema, every check (``--checks all``), at least 50 examples per operation, all four phases (stateful included),
127.0.0.1 only; it must find 0 failures.

The database is created on the session's server for this module, migrated, given the demo knowledge base and dropped
at the end, so no other test's data changes what the server shows (and nothing the run stores is left for them). The
server has the demo knowledge base, its dataset uploaded and one evaluation queued (on a Dagster instance of its own
with no daemon: launched runs stay queued, nothing evaluates), so lookups reach stored data. The answer collection
route may call one endpoint, a real RAG endpoint of the test on 127.0.0.1 (``RAG_COLLECT_ENDPOINTS``;
``RAG_COLLECT_ENV`` allows one variable): the schema Schemathesis reads is the server's with an example body that
names it (no JSON Schema can say which endpoint the operator allowed), so the collection runs for real; generated
URLs get the 403 of an endpoint not allowed.
``rag_pipeline_tests/web/schemathesis.toml`` holds the run's configuration and says why three operations accept
a 422 for schema-valid data. The seed is fixed, so a failure reproduces with the command in the output (kept in
``schemathesis-output.txt`` beside the junit report). The module is the first ``make test`` hands out
(``LONGEST_FIRST`` in rag_pipeline_tests/conftest.py), so it runs beside the rest of the suite. One worker:
CPython 3.11's ``ast.parse``, which Hypothesis calls to describe its filters, is not thread-safe (a ``SystemError:
AST constructor recursion depth mismatch`` with two).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from rag_pipeline.storage.engine import get_engine
from rag_pipeline_tests.answers.rag_endpoint_server import RagEndpoint
from rag_pipeline_tests.conftest import ingest_demo_kb
from rag_pipeline_tests.reliability_helpers import scratch_database
from rag_pipeline_tests.web.conftest import DEMO_DATASET
from rag_pipeline_tests.web.server_helpers import dagster_env, start_server

# a server process on a database of the test server and a run of a few thousand requests
pytestmark = [pytest.mark.db, pytest.mark.slow]

CONFIG = Path(__file__).with_name("schemathesis.toml")
EXAMPLES = 50
SEED = 1
RUN_LIMIT_S = 600
COLLECT = "/api/v1/datasets/{name}/answers/collect"
COLLECT_VARIABLE = "SCHEMATHESIS_COLLECT_TOKEN"


@pytest.fixture(scope="module")
def rag_endpoint():
    with RagEndpoint() as rag:
        yield rag


@pytest.fixture(scope="module")
def own_database():
    """``(URL, demo knowledge base)`` of a database of this module's own on the session's server: created,
    migrated, the demo knowledge base ingested, dropped at the end (with whatever the run stored in it)."""
    with scratch_database("schemathesis") as (_libpq, url):
        own = get_engine(url)
        try:
            yield url, ingest_demo_kb(own)
        finally:
            own.dispose()


@pytest.fixture(scope="module")
def api_server(own_database, rag_endpoint, tmp_path_factory) -> str:
    url, demo_kb = own_database
    home = tmp_path_factory.mktemp("schemathesis")
    (home / "dagster_home").mkdir()
    (home / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    env = {k: v for k, v in dagster_env(home / "dagster_home", home / "datasets", RAG_PROJECT_ROOT=str(home),
                                        RAG_DATABASE_URL=url, RAG_COLLECT_ENDPOINTS=rag_endpoint.url,
                                        RAG_COLLECT_ENV=COLLECT_VARIABLE,
                                        **{COLLECT_VARIABLE: "schemathesis-token-0123"}).items()
           if k not in ("RAG_API_TOKEN", "RAG_ALLOWED_HOSTS")}
    with start_server(env, log=home / "server.log") as (base, _proc):
        kb = f"{base}/api/v1/knowledge-bases/{demo_kb}"
        stored = httpx.post(f"{kb}/retrieval/datasets?name=demo", content=DEMO_DATASET.read_bytes(),
                            headers={"Content-Type": "application/json"}, timeout=120)
        assert stored.status_code in (200, 201), stored.text
        queued = httpx.post(f"{kb}/retrieval/evaluate", json={"dataset": "demo", "strategy_versions": ["keyword-v1"]},
                            timeout=120)
        assert queued.status_code == 202, queued.text
        yield base


def _schema_with_a_collect_example(base: str, demo_kb: str, rag: RagEndpoint, folder: Path) -> Path:
    """The server's schema, with an example body of the collect route that names the allowed endpoint."""
    schema = httpx.get(f"{base}/openapi.json", timeout=30).json()
    operation = schema["paths"][COLLECT]["post"]
    example = {"knowledge_base": demo_kb, "store": True,
               "endpoint": {"url": rag.url, "retries": 0, "headers": [f"X-Token: env:{COLLECT_VARIABLE}"]}}
    operation["requestBody"]["content"]["application/json"]["example"] = example
    for parameter in operation["parameters"]:
        if parameter["name"] == "name":
            parameter["example"] = "demo"
    path = folder / "openapi.json"
    path.write_text(json.dumps(schema), encoding="utf-8")
    return path


def test_schemathesis_finds_no_failure(api_server, own_database, rag_endpoint, tmp_path):
    schema = _schema_with_a_collect_example(api_server, own_database[1], rag_endpoint, tmp_path)
    command = [str(Path(sys.executable).with_name("schemathesis")), "--no-color", "--config-file", str(CONFIG),
               "run", str(schema), "--url", api_server, "--checks", "all", "--max-examples", str(EXAMPLES),
               "--phases", "examples,coverage,fuzzing,stateful", "--workers", "1", "--seed", str(SEED),
               "--request-timeout", "60", "--generation-database", "none", "--report", "junit",
               "--report-dir", str(tmp_path)]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=RUN_LIMIT_S, cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"schemathesis did not finish in {RUN_LIMIT_S} s:\n{(exc.stdout or b'')[-5000:]!r}")
    out = proc.stdout + proc.stderr
    (tmp_path / "schemathesis-output.txt").write_text(out, encoding="utf-8")  # beside the junit report
    operations = re.search(r"Operations:\s+(\d+) selected / (\d+) total", out)
    assert operations and operations.group(1) == operations.group(2), out[-5000:]
    assert "Stateful" in out, out[-5000:]
    cases = re.search(r"(\d+) generated", out)
    assert cases and int(cases.group(1)) >= EXAMPLES * int(operations.group(1)), out[-5000:]
    assert proc.returncode == 0, out[-20000:]
    assert rag_endpoint.requests, "no collection reached the allowed endpoint"
    print(f"schemathesis: {cases.group(1)} cases on {operations.group(1)} operations, 0 failures; the collect "
          f"route asked the endpoint {sum(rag_endpoint.requests.values())} times")
