"""One click on two Celery workers (deploy/celery/): Debian's redis-server, a real ``dagster-daemon`` on the Celery
``dagster.yaml`` and two real ``celery … worker -P threads -c 1`` processes, each in its own empty directory. A click
of four strategies (:func:`queue_evaluations`, what the API and the console call) becomes a run per strategy; both
workers execute some of them, and every strategy's metrics and candidates equal those of the same strategies
evaluated in one in-process ``evaluate_strategies`` run (the default launcher's job and executor)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from rag_pipeline.definitions import defs
from rag_pipeline.defs.jobs import QUEUE_TAG, ROW_TAG
from rag_pipeline.evaluation.runs import case_queries
from rag_pipeline.service.datasets import register_dataset
from rag_pipeline.service.evaluations import run_summaries
from rag_pipeline.service.queued_runs import queue_evaluations
from rag_pipeline_tests.defs.celery_extra import require_celery_extra
from rag_pipeline_tests.web.conftest import DEMO_DATASET
from rag_pipeline_tests.web.server_helpers import ROOT, _stop, dagster_env, free_port, start_daemon

STRATEGIES = ["hybrid-v1", "vector-v1", "keyword-v1", "bm25-v1"]
CELERY_YAML = ROOT / "deploy" / "celery" / "dagster.yaml"
CELERY = str(Path(sys.executable).with_name("celery"))
APP = "rag_pipeline.defs.workers.celery_app"


@contextlib.contextmanager
def started(cmd: list[str], env: dict[str, str], cwd: Path, log: Path):
    out = open(log, "ab")  # noqa: SIM115 - handed to the child, closed below
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        _stop(proc)
        out.close()


def wait_for(what: str, check, timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} not ready in {timeout:.0f} s\n" + (
            log.read_text()[-3000:] if log and log.exists() else "")
        time.sleep(1)


def rows_of(engine, ids: list[str]):
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT id::text AS id, strategy_version, status, error, dagster_run_id, worker "
                                    "FROM retrieval_evaluation_runs WHERE id::text = ANY(:ids)"), {"ids": ids}).all()


def results_of(engine, run_id: str) -> tuple:
    """A run's metrics and, per case, its retrieved ids and metrics."""
    [summary] = run_summaries(engine, [run_id])
    with engine.connect() as conn:
        cases = case_queries.report_page(conn, run_id, after=-1, page=10_000, case_id=None)
    return summary.metrics, [(c.case_id, c.retrieved_chunk_ids, c.metrics) for c in cases]


@pytest.mark.slow  # Redis, a Dagster daemon and two Celery workers
def test_one_click_runs_on_both_workers_with_the_in_process_runs_metrics(engine, demo_kb, tmp_path, monkeypatch):
    require_celery_extra()
    if shutil.which("redis-server") is None:
        message = "redis-server is missing (`apt-get install redis-server`; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(CELERY_YAML, home / "dagster.yaml")
    port = free_port()
    env = dagster_env(home, tmp_path / "datasets", fresh_storage=True,
                      RAG_CELERY_BROKER_URL=f"redis://127.0.0.1:{port}/0")
    for name in ("DAGSTER_HOME", "RAG_DAGSTER_PG_URL", "RAG_DATASETS_DIR", "RAG_EVALUATION_QUEUE",
                 "RAG_CELERY_BROKER_URL"):
        monkeypatch.setenv(name, env[name])
    cases = json.loads(DEMO_DATASET.read_text(encoding="utf-8"))["cases"][:8]
    path = tmp_path / "demo-spread.json"
    path.write_text(json.dumps({"knowledge_base": demo_kb, "cases": cases}), encoding="utf-8")
    stored = register_dataset(engine, path)
    host = socket.gethostname()

    with contextlib.ExitStack() as stack:
        stack.enter_context(started(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                                     "--appendonly", "no"], env, tmp_path, tmp_path / "redis.log"))
        for w in ("w1", "w2"):  # as deploy/celery/README.md: an empty directory, its own DAGSTER_HOME
            (tmp_path / w / "home").mkdir(parents=True)
            shutil.copy(CELERY_YAML, tmp_path / w / "home" / "dagster.yaml")
            worker_env = {**env, "DAGSTER_HOME": str(tmp_path / w / "home"),
                          "RAG_DATABASE_URL": engine.url.render_as_string(hide_password=False)}
            stack.enter_context(started([CELERY, "-A", APP, "worker", "-n", f"{w}@%h", "-Q", "dagster", "-P",
                                         "threads", "-c", "1", "-l", "INFO"], worker_env, tmp_path / w,
                                        tmp_path / f"{w}.log"))
        for w in ("w1", "w2"):
            wait_for(f"worker {w}", lambda w=w: subprocess.run(
                [CELERY, "-A", APP, "inspect", "ping", "-d", f"{w}@{host}"], env=env, cwd=tmp_path,
                capture_output=True, timeout=60).returncode == 0, 180, tmp_path / f"{w}.log")
        stack.enter_context(start_daemon(env, log=tmp_path / "daemon.log"))

        queued = queue_evaluations(engine, demo_kb, stored.dataset_id, STRATEGIES)
        [queue_id] = {r.dagster_run_id for r in queued.runs}
        ids = [r.run_id for r in queued.runs]
        wait_for("every run settled", lambda: all(r.status in ("succeeded", "failed") for r in rows_of(engine, ids)),
                 600, tmp_path / "daemon.log")
    rows = rows_of(engine, ids)
    assert all(r.status == "succeeded" for r in rows), [(r.strategy_version, r.status, r.error) for r in rows]
    assert {r.worker for r in rows} == {f"w1@{host}", f"w2@{host}"}, "the click's runs went to both workers"
    instance = dg.DagsterInstance.get()
    runs = instance.get_runs(filters=dg.RunsFilter(tags={QUEUE_TAG: queue_id}))
    assert sorted(r.tags[ROW_TAG] for r in runs) == sorted(ids), "a Dagster run per strategy, all of the click"
    assert {r.dagster_run_id for r in rows} == {r.run_id for r in runs}

    # the same strategies on the same stored dataset version in one in-process run (the default launcher's job)
    result = defs.resolve_job_def("evaluate_strategies").execute_in_process(
        instance=dg.DagsterInstance.ephemeral(),
        run_config={"ops": {"evaluate_click": {"config": {"dataset_id": stored.dataset_id,
                                                          "runs": dict.fromkeys(STRATEGIES, "")}}}})
    assert result.success
    with engine.connect() as conn:
        local = dict(conn.execute(sa.text(
            "SELECT strategy_version, id::text FROM retrieval_evaluation_runs WHERE dagster_run_id = :d"),
            {"d": result.run_id}).all())
    assert sorted(local) == sorted(STRATEGIES)
    for row in rows:
        metrics, cases_ = results_of(engine, row.id)
        assert (metrics, cases_) == results_of(engine, local[row.strategy_version]), row.strategy_version
        assert len(cases_) == len(cases), row.strategy_version
