"""Dagster commands before ``rag-pipeline db start`` (no ``.env``) or with the database down: one line naming
``rag-pipeline db start`` instead of a 70-line traceback or 200 lines of connection retries."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rag_pipeline.defs import preflight

ROOT = Path(__file__).resolve().parents[2]


def _dagster_job_execute(tmp_path: Path, **env_overrides: str) -> subprocess.CompletedProcess:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if k != "RAG_DAGSTER_PG_URL"}
    env.update(DAGSTER_HOME=str(home), **env_overrides,
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    dagster = Path(sys.executable).with_name("dagster")
    # cwd without a .env (the repo root's would configure the storage)
    return subprocess.run(
        [str(dagster), "job", "execute", "-m", "rag_pipeline.definitions", "-j", "evaluate_retrieval",
         "--tags", '{"dagster/partition": "demo|hybrid-v1"}'],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


def _assert_one_line_hint(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    ours = [line for line in lines if line.startswith("rag_pipeline:")]
    assert len(ours) == 1, lines
    # besides ours, at most Dagster's two-line SupersessionWarning about `dagster job execute`
    assert len(lines) <= 5, lines
    assert "`rag-pipeline db start`" in ours[0]
    return ours[0]


@pytest.mark.slow  # `dagster job execute` end to end in a subprocess (loads Dagster and the code location)
def test_dagster_job_execute_without_env_prints_one_line(tmp_path):
    line = _assert_one_line_hint(_dagster_job_execute(tmp_path))
    assert line == preflight.NOT_CONFIGURED


@pytest.mark.slow  # `dagster job execute` end to end in a subprocess (loads Dagster and the code location)
def test_dagster_job_execute_with_the_database_down_prints_one_line(tmp_path):
    url = f"postgresql+psycopg2://postgres:pw@/dagster?host={tmp_path / 'stopped-pgdata'}"
    line = _assert_one_line_hint(_dagster_job_execute(tmp_path, RAG_DAGSTER_PG_URL=url))
    assert "not running" in line and "pw" not in line.replace("rag_pipeline", "")


def test_storage_problem_without_url_or_server(tmp_path):
    assert preflight.storage_problem({}) == preflight.NOT_CONFIGURED
    socket_dir = tmp_path / "pgdata"
    socket_dir.mkdir()
    problem = preflight.storage_problem({preflight.ENV_VAR: f"postgresql+psycopg2://u@/dagster?host={socket_dir}"})
    assert problem is not None and "no socket in" in problem
    # a TCP server that is not there: refused quickly, password not echoed
    problem = preflight.storage_problem(
        {preflight.ENV_VAR: "postgresql+psycopg2://alice:s3cret@127.0.0.1:1/dagster"})
    assert problem is not None and "127.0.0.1:1 is not reachable" in problem and "s3cret" not in problem


def test_outside_the_dagster_cli_the_check_raises(monkeypatch):
    monkeypatch.delenv(preflight.ENV_VAR, raising=False)
    monkeypatch.setattr(sys, "argv", ["pytest"])
    with pytest.raises(preflight.DagsterStorageNotConfigured, match="rag-pipeline db start"):
        preflight.check_dagster_storage()


def test_a_configured_storage_passes(engine):
    from rag_pipeline.storage.engine import dagster_database_url

    assert preflight.storage_problem({preflight.ENV_VAR: dagster_database_url()}) is None


def test_dagster_storage_in_the_knowledge_base_database_is_refused():
    """Dagster's tables and ours both keep an Alembic ``alembic_version``: one database for both breaks one."""
    kb = "postgresql://alice:S3cretPw@db.example:5433/rag"
    problem = preflight.storage_problem({"RAG_DAGSTER_PG_URL": kb.replace("postgresql:", "postgresql+psycopg2:"),
                                         "RAG_DATABASE_URL": kb})
    assert problem is not None and "names the knowledge-base database of RAG_DATABASE_URL" in problem
    assert "S3cretPw" not in problem


def _stale_project(tmp_path: Path) -> tuple[Path, Path, str]:
    """A project whose .env an earlier `rag-pipeline db start` wrote for the data directory ``a`` (what
    cli.database.write_env_file writes), and another data directory ``b``."""
    project, old, new = tmp_path / "project", tmp_path / "a", tmp_path / "b"
    project.mkdir()
    url = f"postgresql+psycopg2://postgres:@/dagster?host={old}"
    (project / ".env").write_text(f"DAGSTER_HOME={project}\nRAG_DAGSTER_PG_URL={url}\nRAG_PGDATA={old}\n",
                                  encoding="utf-8")
    return project, new, url


def test_a_stale_env_of_another_data_directory_is_named_with_the_fix(tmp_path, monkeypatch):
    """RAG_PGDATA names another data directory than the one .env was written for: the problem says so (both
    directories, the command that rewrites .env), not "no socket in <the other one>"; the server refuses the same
    way. A .env of the same data directory, a process with its own RAG_DAGSTER_PG_URL, or one that uses no embedded
    server (RAG_DATABASE_URL set), is not stale."""
    from rag_pipeline.cli.serve import dagster_environment

    project, new, url = _stale_project(tmp_path)
    monkeypatch.setenv("RAG_PROJECT_ROOT", str(project))
    old = (tmp_path / "a").resolve()
    problem = preflight.storage_problem({"RAG_PGDATA": str(new), "RAG_DAGSTER_PG_URL": url})
    assert problem is not None and "no socket" not in problem, problem
    assert f"{project / '.env'} was written by `rag-pipeline db start` for the embedded PostgreSQL in {old}" in problem
    assert f"but RAG_PGDATA is {new.resolve()}" in problem
    assert f"Run `RAG_PGDATA={new.resolve()} rag-pipeline db start` to rewrite" in problem
    with pytest.raises(ValueError, match="RAG_PGDATA is") as refused:  # what `serve` refuses with
        dagster_environment({"DAGSTER_HOME": str(project), "RAG_PGDATA": str(new), "RAG_DAGSTER_PG_URL": url})
    assert "RAG_PGDATA is" in str(refused.value) and str(old) in str(refused.value)
    same = preflight.storage_problem({"RAG_PGDATA": str(tmp_path / "a"), "RAG_DAGSTER_PG_URL": url})
    assert same is not None and "no socket in" in same, "the .env's own data directory: the usual check"
    own = preflight.storage_problem({"RAG_PGDATA": str(new), "RAG_DAGSTER_PG_URL": url + "&application_name=x"})
    assert own is not None and "RAG_PGDATA is" not in own, "a URL of the process's own is not the .env's"
    external = preflight.storage_problem({"RAG_PGDATA": str(new), "RAG_DAGSTER_PG_URL": url,
                                          "RAG_DATABASE_URL": "postgresql://rag@db.invalid/rag"})
    assert external is None or "RAG_PGDATA is" not in external, "no embedded server in use: RAG_PGDATA is not read"



def test_db_start_rewrites_a_stale_env_for_the_data_directory_in_use_and_says_so(engine, tmp_path, monkeypatch,
                                                                                 capsys):
    """The fix the refusal names: `db start` with RAG_PGDATA rewrites .env for that data directory (saying which
    one it was written for), after which nothing is stale."""
    from rag_pipeline.cli import main

    if os.environ.get("RAG_DATABASE_URL") or not os.environ.get("RAG_PGDATA"):
        pytest.skip("needs the session's embedded server (RAG_TEST_DATABASE_URL names another server)")
    project, _, url = _stale_project(tmp_path)
    in_use = Path(os.environ["RAG_PGDATA"]).resolve()  # the session's server (running)
    monkeypatch.setenv("RAG_PROJECT_ROOT", str(project))
    assert "RAG_PGDATA is" in preflight.storage_problem({"RAG_PGDATA": str(in_use), "RAG_DAGSTER_PG_URL": url})
    assert main(["db", "start"]) == 0
    out = capsys.readouterr().out
    assert f"it was written for the embedded PostgreSQL in {(tmp_path / 'a').resolve()}, now for {in_use}" in out
    written = dict(line.split("=", 1) for line in (project / ".env").read_text(encoding="utf-8").splitlines())
    assert Path(written["RAG_PGDATA"]).resolve() == in_use and written["RAG_DAGSTER_PG_URL"] != url
    assert preflight.storage_problem({"RAG_PGDATA": str(in_use), "RAG_DAGSTER_PG_URL": written["RAG_DAGSTER_PG_URL"]}) \
        is None


def _postgres_error(engine, statement: str):
    """The error PostgreSQL gives ``statement`` (run twice where it needs an existing object), as dagster-postgres
    sees it: psycopg2 under SQLAlchemy. Rolled back."""
    import sqlalchemy as sa

    psycopg2_engine = sa.create_engine(engine.url.set(drivername="postgresql+psycopg2"))
    try:
        with psycopg2_engine.connect() as conn:
            try:
                for _ in range(2):
                    conn.exec_driver_sql(statement)
            except sa.exc.ProgrammingError as exc:
                return exc
            finally:
                conn.rollback()
    finally:
        psycopg2_engine.dispose()
    raise AssertionError(f"{statement!r} twice gave no error")


@pytest.mark.parametrize(("statement", "retried"), [
    ("CREATE TYPE preflight_probe AS (a int)", True),  # type "preflight_probe" already exists: 42710
    ("SELECT FROM", False),  # a syntax error: not a race, raised at once
])
def test_tables_created_by_another_process_meanwhile_are_loaded_again(engine, monkeypatch, statement, retried):
    """Two processes that start together on a new Dagster database both create its tables; the second can get
    ``type "runs" already exists`` (dagster-postgres retries only ``duplicate_table``): it loads the storage again."""
    from dagster_postgres import DagsterPostgresStorage

    error = _postgres_error(engine, statement)
    assert (error.orig.pgcode == preflight.DUPLICATE_OBJECT) is retried
    calls = []

    def load(cls, inst_data, config_value):
        calls.append(config_value)
        if len(calls) == 1:
            raise error
        return "the storage"

    monkeypatch.setattr(DagsterPostgresStorage, "from_config_value", classmethod(load))
    if retried:
        assert preflight.RagPostgresStorage.from_config_value(None, {"postgres_url": "x"}) == "the storage"
        assert len(calls) == 2
    else:
        with pytest.raises(type(error)):
            preflight.RagPostgresStorage.from_config_value(None, {"postgres_url": "x"})
        assert len(calls) == 1
