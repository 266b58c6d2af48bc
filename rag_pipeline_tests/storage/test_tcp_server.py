"""The embedded server on TCP with a password (``rag-pipeline db start --listen``, docs/scaling.md): the password
is printed only when asked for, a wrong one is a clear exit 3, and the CLI, a Dagster run and the HTTP API all
work with ``RAG_DATABASE_URL=postgresql://postgres:PASSWORD@127.0.0.1:PORT/rag``. ``RAG_DATABASE_URL`` alone puts
Dagster's storage in the sibling database ``dagster``, never in the knowledge-base database."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from dotenv import dotenv_values

from rag_pipeline.storage import embedded_server as embedded_pg
from rag_pipeline_tests.eval_helpers import TINY_DOCS, tiny_cases, write_dataset
from rag_pipeline_tests.web.server_helpers import free_port, get_json, start_server

pytestmark = pytest.mark.db  # every test talks to the TCP server this module starts

ROOT = Path(__file__).resolve().parents[2]
RAG = Path(sys.executable).with_name("rag-pipeline")
KB = "tcp-tiny"


def _run(env: dict[str, str], *args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(RAG), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@dataclass
class TcpServer:
    """The server of :func:`tcp_server`; its secrets stay out of pytest's failure reports (``repr=False``)."""

    project: Path
    port: int
    env: dict[str, str] = field(repr=False)  # without RAG_DATABASE_URL: the CLI reaches it on the socket
    tcp_env: dict[str, str] = field(repr=False)  # RAG_DATABASE_URL and RAG_DAGSTER_PG_URL of .env (TCP)
    started: subprocess.CompletedProcess = field(repr=False)
    password: str = field(repr=False)
    url: str = field(repr=False)


@pytest.fixture(scope="module")
def tcp_server():
    """``rag-pipeline db start --listen 127.0.0.1:PORT`` in a fresh project folder (its own data directory)."""
    project = Path(tempfile.mkdtemp(prefix="rag_tcp_"))  # short: the socket lives in <project>/.rag_pipeline
    shutil.copy(ROOT / "dagster.yaml", project / "dagster.yaml")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RAG_DATABASE_URL", "RAG_PGDATA", "RAG_DAGSTER_PG_URL")}
    env.update(RAG_PROJECT_ROOT=str(project), DAGSTER_HOME=str(project), PYTHONWARNINGS="ignore::FutureWarning",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    try:
        started = _run(env, "db", "start", "--listen", f"127.0.0.1:{port}", cwd=project)
        assert started.returncode == 0, started.stdout + started.stderr
        values = dotenv_values(project / ".env")
        password = psycopg.conninfo.conninfo_to_dict(values["RAG_DATABASE_URL"].replace("+psycopg", ""))["password"]
        tcp_env = {**env, "RAG_DATABASE_URL": values["RAG_DATABASE_URL"],
                   "RAG_DAGSTER_PG_URL": values["RAG_DAGSTER_PG_URL"]}
        yield TcpServer(project, port, env, tcp_env, started, password, values["RAG_DATABASE_URL"])
    finally:
        embedded_pg.stop(project / ".rag_pipeline" / "pgdata")
        shutil.rmtree(project, ignore_errors=True)


def _tcp(server, password: str | None, dbname: str = "rag") -> psycopg.Connection:
    return psycopg.connect(host="127.0.0.1", port=server.port, user="postgres", password=password, dbname=dbname,
                           connect_timeout=10, autocommit=True)


def test_listen_needs_the_password_and_prints_it_only_when_asked(tcp_server):
    server = tcp_server
    assert server.password and len(server.password) >= 24
    assert server.password not in server.started.stdout + server.started.stderr
    assert f"listening on postgresql+psycopg://postgres:***@127.0.0.1:{server.port}/rag" in server.started.stdout
    for path in (server.project / ".env", server.project / ".rag_pipeline" / "pgdata" / "rag_listen.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert server.url == f"postgresql+psycopg://postgres:{server.password}@127.0.0.1:{server.port}/rag"
    assert dotenv_values(server.project / ".env")["RAG_DAGSTER_PG_URL"] == \
        f"postgresql+psycopg2://postgres:{server.password}@127.0.0.1:{server.port}/dagster"

    for args in (("db", "url"), ("db", "url", "--dagster"), ("db", "status"), ("db", "start")):
        proc = _run(server.env, *args, cwd=server.project)
        assert proc.returncode == 0, proc.stderr
        assert server.password not in proc.stdout + proc.stderr and "***" in proc.stdout, (args, proc.stdout)
    assert _run(server.env, "db", "password", cwd=server.project).stdout == server.password + "\n"
    shown = _run(server.env, "db", "url", "--show-password", cwd=server.project)
    assert shown.stdout.strip() == server.url

    with pytest.raises(psycopg.OperationalError, match="password"):
        _tcp(server, None)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        _tcp(server, "not-the-password")
    with _tcp(server, server.password) as conn:
        assert conn.execute("SHOW password_encryption").fetchone()[0] == "scram-sha-256"
        verifier = conn.execute("SELECT rolpassword FROM pg_authid WHERE rolname = 'postgres'").fetchone()[0]
        assert verifier.startswith("SCRAM-SHA-256$")


def test_a_later_start_listens_again_with_the_same_password(tcp_server):
    server = tcp_server
    assert _run(server.env, "db", "stop", cwd=server.project).stdout.strip() == "stopped"
    with pytest.raises(psycopg.OperationalError):
        _tcp(server, server.password)
    again = _run(server.env, "db", "start", cwd=server.project)  # no --listen: the recorded address
    assert again.returncode == 0, again.stderr
    with _tcp(server, server.password) as conn:
        assert conn.execute("SELECT inet_server_addr()::text").fetchone()[0].startswith("127.0.0.1")
    assert dotenv_values(server.project / ".env")["RAG_DATABASE_URL"] == server.url


def test_a_wrong_password_is_exit_3_with_the_password_masked(tcp_server):
    wrong = "Wr0ngPassw0rdValue"
    env = {**tcp_server.env, "RAG_DATABASE_URL": f"postgresql://postgres:{wrong}@127.0.0.1:{tcp_server.port}/rag"}
    proc = _run(env, "runs", cwd=tcp_server.project)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused the password" in lines[0] and "postgres:***@127.0.0.1" in lines[0], lines
    assert wrong not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


def test_database_url_alone_keeps_dagster_out_of_the_kb_database(tcp_server, tmp_path):
    """``RAG_DATABASE_URL`` without ``RAG_DAGSTER_PG_URL``: ``db start`` creates the sibling database ``dagster``,
    points .env's Dagster there, and the knowledge-base database holds no Dagster table."""
    with _tcp(tcp_server, tcp_server.password) as conn:
        conn.execute("DROP DATABASE IF EXISTS rag_alone")
        conn.execute("CREATE DATABASE rag_alone")
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "dagster.yaml", project / "dagster.yaml")
    kb_url = f"postgresql://postgres:{tcp_server.password}@127.0.0.1:{tcp_server.port}/rag_alone"
    env = {**tcp_server.env, "RAG_DATABASE_URL": kb_url, "RAG_PROJECT_ROOT": str(project),
           "DAGSTER_HOME": str(project)}
    proc = _run(env, "db", "start", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert tcp_server.password not in proc.stdout + proc.stderr
    assert dotenv_values(project / ".env")["RAG_DAGSTER_PG_URL"] == \
        f"postgresql+psycopg2://postgres:{tcp_server.password}@127.0.0.1:{tcp_server.port}/dagster"
    with _tcp(tcp_server, tcp_server.password, "rag_alone") as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert "knowledge_bases" in tables
    assert not tables & {"runs", "event_logs", "run_tags", "instance_info", "daemon_heartbeats"}, sorted(tables)
    with _tcp(tcp_server, tcp_server.password, "dagster") as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'event_logs'").fetchone()[0] == 1


@pytest.mark.slow  # ingests with the encoder, a Dagster run and an HTTP server in subprocesses
def test_cli_dagster_and_api_over_tcp(tcp_server, tmp_path, monkeypatch):
    env = {**tcp_server.tcp_env, "RAG_DATASETS_DIR": str(tmp_path / "datasets")}
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in TINY_DOCS.items():
        (docs / name).write_text(text + "\n", encoding="utf-8")
    ingest = _run(env, "ingest", str(docs), "--knowledge-base", KB, "--text-search", "simple", cwd=tmp_path)
    assert ingest.returncode == 0, ingest.stderr
    engine = sa.create_engine(tcp_server.url)
    try:
        with engine.connect() as conn:
            chunks = dict(conn.execute(sa.text(
                "SELECT d.original_name, c.id::text FROM document_chunks c JOIN documents d ON d.id = c.document_id "
                "JOIN knowledge_bases kb ON kb.id = c.knowledge_base_id WHERE kb.name = :n AND c.is_current"),
                {"n": KB}).all())
        dataset = write_dataset(tmp_path / "datasets" / "x.json", KB, tiny_cases(chunks)[:3], name="tcp-tiny")
        report = tmp_path / "report.json"
        evaluate = _run(env, "evaluate", "--dataset", str(dataset), "--strategy", "keyword-v1", "--quiet",
                        "--output", str(report), cwd=tmp_path)
        assert evaluate.returncode == 0, evaluate.stderr
        assert len(json.loads(report.read_text(encoding="utf-8"))["cases"]) == 3

        for key, value in env.items():  # the instance of the project (.env's Dagster URL over TCP)
            monkeypatch.setenv(key, value)
        import dagster as dg

        with dg.DagsterInstance.get() as instance:
            instance.add_dynamic_partitions("dataset", ["tcp-tiny"])
        job = subprocess.run(
            [str(Path(sys.executable).with_name("dagster")), "job", "execute", "-m", "rag_pipeline.definitions",
             "-j", "evaluate_retrieval", "--tags", json.dumps({"dagster/partition": "tcp-tiny|keyword-v1"})],
            cwd=tcp_server.project, env=env, capture_output=True, text=True, timeout=600)
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
        assert tcp_server.password not in job.stdout + job.stderr
        with engine.connect() as conn:
            statuses = conn.execute(sa.text(
                "SELECT status, dagster_run_id IS NOT NULL FROM retrieval_evaluation_runs "
                "WHERE partition_key = 'tcp-tiny|keyword-v1'")).all()
        assert [tuple(r) for r in statuses] == [("succeeded", True)]
    finally:
        engine.dispose()

    with start_server(env, log=tmp_path / "serve.log") as (base, _proc):
        status, page = get_json(f"{base}/api/v1/knowledge-bases/{KB}/retrieval/runs")
    assert status == 200, page
    assert sorted(r["strategy_version"] for r in page["runs"]) == ["keyword-v1", "keyword-v1"]
    assert tcp_server.password not in (tmp_path / "serve.log").read_text(errors="replace")
