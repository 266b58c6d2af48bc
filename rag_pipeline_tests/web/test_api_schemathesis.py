"""Schemathesis against a real ``rag-pipeline serve`` on the session's database: every operation of the OpenAPI
schema, every check (``--checks all``), at least 50 examples per operation, all four phases (stateful included),
127.0.0.1 only; it must find 0 failures.

The server has the demo knowledge base, its dataset uploaded and one evaluation queued (on a Dagster instance of
its own with no daemon: launched runs stay queued, nothing evaluates), so lookups reach stored data. The answer
collection route may call one endpoint, a real RAG endpoint of the test on 127.0.0.1 (``RAG_COLLECT_ENDPOINTS``;
``RAG_COLLECT_ENV`` allows one variable): the schema Schemathesis reads is the server's with an example body that
names it (no JSON Schema can say which endpoint the operator allowed), so the collection runs for real; generated
URLs get the 403 of an endpoint not allowed.
``rag_pipeline_tests/web/schemathesis.toml`` holds the run's configuration and says why three operations accept
a 422 for schema-valid data. The seed is fixed, so a failure reproduces with the command in the output. The runs
queued meanwhile are failed at the end (they would keep the demo dataset busy for the tests after). One worker:
CPython 3.11's ``ast.parse``, which Hypothesis calls to describe its filters, is not thread-safe (a ``SystemError:
AST constructor recursion depth mismatch`` with two).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from rag_pipeline.answers.runs.queries import delete_runs
from rag_pipeline.evaluation.runs.lifecycle import mark_failed
from rag_pipeline.service.answers import list_answer_runs
from rag_pipeline.service.queued_runs import queued_runs
from rag_pipeline_tests.answers.rag_endpoint_server import RagEndpoint
from rag_pipeline_tests.web.conftest import DEMO_DATASET
from rag_pipeline_tests.web.server_helpers import dagster_env, start_server

# a server process on the session's database and a run of a few thousand requests
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
def api_server(engine, demo_kb, rag_endpoint, tmp_path_factory) -> str:
    started = datetime.now(UTC)
    home = tmp_path_factory.mktemp("schemathesis")
    (home / "dagster_home").mkdir()
    (home / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    env = {k: v for k, v in dagster_env(home / "dagster_home", home / "datasets", RAG_PROJECT_ROOT=str(home),
                                        RAG_COLLECT_ENDPOINTS=rag_endpoint.url, RAG_COLLECT_ENV=COLLECT_VARIABLE,
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
        try:
            yield base
        finally:  # no daemon serves this server's runs: left queued, they would keep the demo dataset busy
            with pytest.MonkeyPatch.context() as patch:  # the server's own queue: only its runs are there
                patch.setenv("RAG_EVALUATION_QUEUE", env["RAG_EVALUATION_QUEUE"])
                for run in queued_runs(engine):
                    mark_failed(engine, run.run_id, "queued by the Schemathesis test, whose server has no daemon")
            # the answer runs its collections stored would be another answerer on the demo dataset's pages
            collected = [r.run_id for r in list_answer_runs(engine, knowledge_base=demo_kb, limit=1000).runs
                         if datetime.fromisoformat(r.created_at) >= started]
            with engine.begin() as conn:
                delete_runs(conn, collected)


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


def test_schemathesis_finds_no_failure(api_server, demo_kb, rag_endpoint, tmp_path):
    schema = _schema_with_a_collect_example(api_server, demo_kb, rag_endpoint, tmp_path)
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
    operations = re.search(r"Operations:\s+(\d+) selected / (\d+) total", out)
    assert operations and operations.group(1) == operations.group(2), out[-5000:]
    assert "Stateful" in out, out[-5000:]
    cases = re.search(r"(\d+) generated", out)
    assert cases and int(cases.group(1)) >= EXAMPLES * int(operations.group(1)), out[-5000:]
    assert proc.returncode == 0, out[-20000:]
    assert rag_endpoint.requests, "no collection reached the allowed endpoint"
    print(f"schemathesis: {cases.group(1)} cases on {operations.group(1)} operations, 0 failures; the collect "
          f"route asked the endpoint {sum(rag_endpoint.requests.values())} times")
