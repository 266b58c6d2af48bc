"""What a real ``rag-pipeline serve`` answers before any route runs: a Host that is not its own (DNS rebinding)
→ 421, a NUL byte in a path or query parameter → 422 naming it; a token of white space plus one character is
refused; Swagger UI comes from the server itself; the OpenAPI schema states the name patterns, the 400s and a
405's full ``Allow``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from rag_pipeline_tests.web.conftest import DEMO_DATASET
from rag_pipeline_tests.web.server_helpers import dagster_env, free_port, start_server

# real server processes on the session's database
pytestmark = [pytest.mark.db, pytest.mark.slow]

TOKEN = "guard-token-0123456789abcdef"


def _local_instance(home: Path, **extra: str) -> dict[str, str]:
    """A server's environment on a Dagster instance of its own (local storage): no daemon, runs stay queued."""
    (home / "dagster_home").mkdir()
    (home / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    return dagster_env(home / "dagster_home", home / "datasets", **extra)


@pytest.fixture(scope="module")
def loopback_server(demo_kb, tmp_path_factory) -> str:
    """``serve`` on 127.0.0.1 without a token (the default); the demo knowledge base is ingested."""
    home = tmp_path_factory.mktemp("guards")
    env = {k: v for k, v in _local_instance(home).items() if k not in ("RAG_API_TOKEN", "RAG_ALLOWED_HOSTS")}
    with start_server(env, log=home / "server.log") as (base, _proc):
        yield base


def _port(base: str) -> int:
    return urlsplit(base).port


def _datasets(base: str) -> list[str]:
    reply = httpx.get(f"{base}/api/v1/knowledge-bases/demo/retrieval/datasets", timeout=60)
    assert reply.status_code == 200, reply.text
    return [d["name"] for d in reply.json()["datasets"]]


def test_a_rebinding_host_is_refused_before_anything_runs(loopback_server):
    port = _port(loopback_server)
    before = _datasets(loopback_server)
    headers = {"Host": f"attacker.example:{port}", "Origin": f"http://attacker.example:{port}",
               "Sec-Fetch-Site": "same-origin"}
    upload = httpx.post(f"{loopback_server}/api/v1/knowledge-bases/demo/retrieval/datasets?name=rebound",
                        content=DEMO_DATASET.read_bytes(), headers={**headers, "Content-Type": "application/json"},
                        timeout=60)
    assert upload.status_code == 421, upload.text
    assert upload.headers["content-type"].startswith("application/problem+json")
    assert "attacker.example" in upload.json()["detail"] and "DNS-rebinding" in upload.json()["detail"]
    assert _datasets(loopback_server) == before  # nothing stored
    for path in ("/api/v1/knowledge-bases/demo/chunks?search=a", "/healthz", "/admin/retrieval-evaluations"):
        assert httpx.get(loopback_server + path, headers=headers, timeout=60).status_code == 421, path
    wrong_port = httpx.get(f"{loopback_server}/api/v1/knowledge-bases", headers={"Host": "localhost:1"}, timeout=60)
    assert wrong_port.status_code == 421
    assert httpx.get(f"{loopback_server}/healthz", headers={"Host": "local host"}, timeout=60).status_code == 400


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}", "[::1]:{port}"])
def test_the_loopback_names_on_the_servers_port_are_served(loopback_server, host):
    reply = httpx.get(f"{loopback_server}/api/v1/knowledge-bases",
                      headers={"Host": host.format(port=_port(loopback_server))}, timeout=60)
    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize(("path", "where", "name"), [
    ("/api/v1/knowledge-bases/a%00b", "path", "id"),
    ("/api/v1/knowledge-bases/demo/retrieval/runs?dataset=a%00b", "query", "dataset"),
    ("/api/v1/knowledge-bases/demo/chunks?document=a%00b", "query", "document"),
    ("/api/v1/retrieval/evaluations/abcd?case_id=%00", "query", "case_id"),
    ("/api/v1/answer-runs?answerer=x%00", "query", "answerer"),
])
def test_a_nul_byte_in_a_parameter_is_bad_input_naming_it(loopback_server, path, where, name):
    reply = httpx.get(loopback_server + path, timeout=60)
    assert reply.status_code == 422, reply.text
    problem = reply.json()
    assert f"{where} parameter `{name}` contains a NUL byte" in problem["detail"]
    assert problem["errors"][0]["field"] == name and problem["errors"][0]["location"] == [where, name]


def test_swagger_ui_is_served_by_the_server_itself(loopback_server):
    page = httpx.get(f"{loopback_server}/docs", timeout=60)
    assert page.status_code == 200
    assert "cdn." not in page.text and "https://" not in page.text, page.text
    for asset in ("/docs/static/swagger-ui-bundle.js", "/docs/static/swagger-ui.css"):
        assert f'"{asset}"' in page.text
        reply = httpx.get(loopback_server + asset, timeout=60)
        assert reply.status_code == 200 and len(reply.content) > 100_000, asset


def test_the_openapi_schema_states_patterns_and_every_4xx(loopback_server):
    schema = httpx.get(f"{loopback_server}/openapi.json", timeout=60).json()
    runs = schema["paths"]["/api/v1/knowledge-bases/{id}/retrieval/runs"]["get"]["parameters"]
    dataset = next(p for p in runs if p["name"] == "dataset")["schema"]
    assert dataset["pattern"].startswith("^") and "pattern" in next(p for p in runs if p["name"] == "id")["schema"]
    body = schema["components"]["schemas"]["EvaluateRequest"]["properties"]["strategy_versions"]
    item = next(s for s in body["anyOf"] if s.get("type") == "array")["items"]
    assert item["minLength"] == 1 and "pattern" in item
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if path.startswith("/api/v1/"):
                assert "400" in operation["responses"], (method, path)
    allowed = httpx.options(f"{loopback_server}/api/v1/knowledge-bases/demo/retrieval/datasets", timeout=60)
    assert allowed.status_code == 405 and allowed.headers["allow"] == "GET, POST"


def test_filters_refuse_names_no_run_can_have(loopback_server):
    for path in ("/api/v1/knowledge-bases/demo/retrieval/runs?dataset=", "/api/v1/answer-runs?dataset=a%20b",
                 "/api/v1/answer-runs?knowledge_base=", "/api/v1/knowledge-bases/demo/retrieval/runs?strategy=x/y"):
        reply = httpx.get(loopback_server + path, timeout=60)
        assert reply.status_code == 422, (path, reply.text)


def _serve(env: dict, host: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rag_pipeline.cli", "serve", "--host", host, "--port",
                           str(free_port())], env=env, capture_output=True, text=True, timeout=timeout)


def test_a_token_needs_16_characters_other_than_white_space(web_env):
    env = {k: v for k, v in web_env.items() if k != "RAG_ALLOWED_HOSTS"}
    try:
        proc = _serve({**env, "RAG_API_TOKEN": " " * 15 + "x"}, "0.0.0.0")
    except subprocess.TimeoutExpired:
        pytest.fail("serve started on 0.0.0.0 with a token of 15 spaces and one character")
    assert proc.returncode == 2, proc.stderr
    assert "at least 16" in proc.stderr and "Traceback" not in proc.stderr


def test_allowed_hosts_without_a_token_refuses_to_start(web_env):
    env = {k: v for k, v in web_env.items() if k != "RAG_API_TOKEN"}
    try:
        proc = _serve({**env, "RAG_ALLOWED_HOSTS": "rag.example"}, "127.0.0.1")
    except subprocess.TimeoutExpired:
        pytest.fail("serve started with RAG_ALLOWED_HOSTS and no token")
    assert proc.returncode == 2, proc.stderr
    assert "RAG_ALLOWED_HOSTS" in proc.stderr and "RAG_API_TOKEN" in proc.stderr


def test_with_a_token_the_allowed_hosts_are_served_and_no_other(engine, tmp_path):
    env = _local_instance(tmp_path, RAG_API_TOKEN=TOKEN, RAG_ALLOWED_HOSTS="rag.example, other.example:9")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with start_server(env, host="0.0.0.0", log=tmp_path / "server.log") as (base, _proc):
        port = _port(base)
        for host, status in ((f"rag.example:{port}", 200), (f"localhost:{port}", 200), ("other.example:9", 200),
                             (f"other.example:{port}", 421), (f"attacker.example:{port}", 421)):
            reply = httpx.get(f"{base}/api/v1/knowledge-bases", headers={**auth, "Host": host}, timeout=60)
            assert reply.status_code == status, (host, reply.text)
        problem = httpx.get(f"{base}/healthz", headers={"Host": "attacker.example"}, timeout=60).json()
        assert "RAG_ALLOWED_HOSTS" in problem["detail"], json.dumps(problem)
