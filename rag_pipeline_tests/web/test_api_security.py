"""Access rules of ``rag-pipeline serve`` on real processes: loopback by default, a token beyond it (bearer for the
API, a login session for pages), cross-site writes refused, CSRF tokens on forms; and a queue without a Dagster
daemon is never silent."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import requests

from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, tiny_cases
from rag_pipeline_tests.web.server_helpers import dagster_env, free_port, start_server

# two more server processes
pytestmark = [pytest.mark.db, pytest.mark.slow]

TOKEN = "test-token-0123456789abcdef"


def _serve_refused(env: dict, host: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rag_pipeline.cli", "serve", "--host", host, "--port",
                           str(free_port())], env=env, capture_output=True, text=True, timeout=300)


def test_beyond_loopback_without_a_token_refuses_to_start(web_env):
    env = {k: v for k, v in web_env.items() if k != "RAG_API_TOKEN"}
    proc = _serve_refused(env, "0.0.0.0")
    assert proc.returncode == 2, proc.stderr
    assert "refusing to listen on 0.0.0.0" in proc.stderr and "RAG_API_TOKEN" in proc.stderr
    assert "Traceback" not in proc.stderr
    short = _serve_refused({**env, "RAG_API_TOKEN": "short"}, "0.0.0.0")
    assert short.returncode == 2 and "at least 16" in short.stderr, short.stderr


def _local_instance(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a server on a Dagster instance of its own (local storage in ``home``): no daemon."""
    (home / "dagster_home").mkdir()
    (home / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    return dagster_env(home / "dagster_home", home / "datasets", **extra)


@pytest.fixture(scope="module")
def guarded_server(engine, tmp_path_factory):
    """``serve --host 0.0.0.0`` with RAG_API_TOKEN, on a Dagster instance (local storage) that no daemon serves;
    yields (base URL, DAGSTER_HOME)."""
    home = tmp_path_factory.mktemp("guarded")
    env = _local_instance(home, RAG_API_TOKEN=TOKEN)
    with start_server(env, host="0.0.0.0", log=home / "server.log") as (base, _proc):
        yield base, Path(env["DAGSTER_HOME"])


def _auth(token: str = TOKEN) -> dict:
    return {"Authorization": f"Bearer {token}"}


def test_every_api_call_needs_the_bearer_token(guarded_server):
    guarded_server = guarded_server[0]
    url = f"{guarded_server}/api/v1/knowledge-bases"
    missing = requests.get(url, timeout=60)
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert missing.headers["content-type"].startswith("application/problem+json")
    assert requests.get(url, headers=_auth("wrong-token-0123456789"), timeout=60).status_code == 401
    assert requests.get(url, headers=_auth(), timeout=60).status_code == 200
    for path in ("/api/v1/retrieval/evaluations/abcd", "/api/v1/knowledge-bases/demo/retrieval/runs"):
        assert requests.get(guarded_server + path, timeout=60).status_code == 401, path
    assert requests.post(f"{guarded_server}/api/v1/knowledge-bases/demo/retrieval/evaluate", json={},
                         timeout=60).status_code == 401
    assert requests.get(f"{guarded_server}/healthz", timeout=60).status_code == 200  # liveness stays open


def test_pages_need_a_login_session_with_csrf(guarded_server):
    guarded_server = guarded_server[0]
    s = requests.Session()
    page = s.get(f"{guarded_server}/admin/retrieval-evaluations", allow_redirects=False, timeout=60)
    assert page.status_code == 303 and page.headers["location"].startswith("/admin/login?next=/admin/")
    form = s.get(f"{guarded_server}/admin/login", timeout=60)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)
    no_csrf = s.post(f"{guarded_server}/admin/login", data={"token": TOKEN}, allow_redirects=False, timeout=60)
    assert no_csrf.status_code == 403
    wrong = s.post(f"{guarded_server}/admin/login", data={"token": "nope", "csrf_token": csrf},
                   allow_redirects=False, timeout=60)
    assert wrong.status_code == 401 and "wrong token" in wrong.text
    ok = s.post(f"{guarded_server}/admin/login", data={"token": TOKEN, "csrf_token": csrf,
                                                       "next": "https://evil.example/"},
                allow_redirects=False, timeout=60)
    assert ok.status_code == 303 and ok.headers["location"] == "/admin/retrieval-evaluations"  # no open redirect
    cookie = ok.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert s.get(f"{guarded_server}/admin/retrieval-evaluations", allow_redirects=False, timeout=60).status_code == 200
    assert s.get(f"{guarded_server}/api/v1/knowledge-bases", timeout=60).status_code == 200  # the session works
    write = s.post(f"{guarded_server}/api/v1/knowledge-bases/demo/retrieval/evaluate", json={"dataset": "x"},
                   timeout=60)
    assert write.status_code == 403 and "X-CSRF-Token" in write.json()["detail"]
    logout_csrf = re.search(r'name="csrf_token" value="([^"]+)"',
                            s.get(f"{guarded_server}/admin/login", timeout=60).text).group(1)
    s.post(f"{guarded_server}/admin/logout", data={"csrf_token": logout_csrf}, allow_redirects=False, timeout=60)
    assert s.get(f"{guarded_server}/api/v1/knowledge-bases", timeout=60).status_code == 401


def test_cross_site_writes_are_refused_even_with_the_token(guarded_server):
    guarded_server = guarded_server[0]
    url = f"{guarded_server}/api/v1/knowledge-bases/demo/retrieval/evaluate"
    evil = requests.post(url, json={"dataset": "x"}, headers={**_auth(), "Origin": "https://evil.example"},
                         timeout=60)
    assert evil.status_code == 403 and "cross-site" in evil.json()["detail"]
    fetch = requests.post(url, json={"dataset": "x"}, headers={**_auth(), "Sec-Fetch-Site": "cross-site"}, timeout=60)
    assert fetch.status_code == 403
    same = requests.post(url, json={"dataset": "x"}, headers={**_auth(), "Origin": guarded_server}, timeout=60)
    assert same.status_code == 404, same.text  # past the guard: the knowledge base does not exist


def test_without_a_daemon_queued_runs_say_how_to_start_one(guarded_server, engine, tmp_path, kb_name, monkeypatch):
    """No daemon: every answer says so with the fix; once a daemon's sensor has requested the click's Dagster run,
    a queued run whose Dagster run is cancelled becomes failed."""
    from rag_pipeline.definitions import defs
    from rag_pipeline.defs.resources import RagDatabase
    from rag_pipeline.defs.sensors import queued_evaluations

    guarded_server, dagster_home = guarded_server
    health = requests.get(f"{guarded_server}/healthz", timeout=60).json()
    assert health["queue"]["daemon_running"] is False and "make dev" in health["queue"]["message"]
    chunks = ingest_tiny_kb(engine, kb_name, tmp_path / "kb")
    launched = requests.post(f"{guarded_server}/api/v1/knowledge-bases/{kb_name}/retrieval/evaluate",
                             json={"name": "no-daemon", "cases": tiny_cases(chunks),
                                   "strategy_versions": ["keyword-v1"]},
                             headers=_auth(), timeout=120)
    assert launched.status_code == 202, launched.text
    body = launched.json()
    assert body["queue"]["daemon_running"] is False and "rag-pipeline serve --with-daemon" in body["queue"]["message"]
    run = body["runs"][0]
    time.sleep(1)
    detail = requests.get(guarded_server + run["links"]["self"], headers=_auth(), timeout=60).json()
    assert detail["summary"]["status"] == "queued" and detail["cases"] == []
    assert "make dev" in detail["queue"]["message"]
    history = requests.get(f"{guarded_server}/api/v1/knowledge-bases/{kb_name}/retrieval/runs", headers=_auth(),
                           timeout=60).json()
    assert [r["status"] for r in history["runs"]] == ["queued"] and history["queue"]["daemon_running"] is False
    monkeypatch.setenv("RAG_EVALUATION_QUEUE", str(dagster_home))  # the server's queue (server_helpers.dagster_env)
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:  # one tick of a daemon's sensor
        context = dg.build_sensor_context(instance=instance, resources={"rag_db": RagDatabase()})
        [request] = [r for r in queued_evaluations(context).run_requests if r.run_key == run["dagster_run_id"]]
        assert request.tags["rag/dataset"] == "no-daemon"
        dagster_run = instance.create_run_for_job(defs.resolve_job_def("evaluate_strategies"),
                                                  run_config=request.run_config, tags=request.tags)
        instance.report_run_canceled(dagster_run)  # as the UI's "terminate" does for a queued run
        queued_evaluations(context)
    deadline = time.monotonic() + 60
    while (summary := requests.get(guarded_server + run["links"]["self"], headers=_auth(),
                                   timeout=60).json()["summary"])["status"] == "queued":
        assert time.monotonic() < deadline, "the cancelled run stayed queued"
        time.sleep(1)
    assert summary["status"] == "failed" and "was cancelled before the evaluation started" in summary["error"]


def test_serve_with_daemon_starts_one_and_stops_it(engine, tmp_path):
    env = _local_instance(tmp_path)
    log = tmp_path / "server.log"
    with start_server(env, log=log, extra_args=("--with-daemon",)) as (base, _proc):
        deadline = time.monotonic() + 240
        while not requests.get(base + "/healthz", timeout=60).json()["queue"]["daemon_running"]:
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(3)
        started = re.search(r"started a Dagster daemon \(pid (\d+)\)", log.read_text())
        assert started, log.read_text()[-2000:]
        pid = int(started.group(1))
        assert Path(f"/proc/{pid}").exists()
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}").exists() and "zombie" not in _proc_state(pid):
        assert time.monotonic() < deadline, "the daemon outlived the server"
        time.sleep(1)


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"
