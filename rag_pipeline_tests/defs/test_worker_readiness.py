"""What a Celery worker needs ships with the package and is checked when it starts (deploy/celery/README.md): the
deployment's dagster.yaml (written by ``python -m rag_pipeline.defs.workers config DIR``), the database, every
model the strategies use. A real ``celery worker`` missing one refuses to start, naming it; the instance check
says ``ok``. The worker's run of every shipped strategy and its kill -9: deploy/celery/smoke.sh."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rag_pipeline.storage.engine import dagster_database_url
from rag_pipeline_tests.defs.celery_extra import require_celery_extra

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture
def worker_env(engine, tmp_path) -> dict[str, str]:
    """A worker host's environment: no checkout (an empty working directory), its DAGSTER_HOME written by the
    package's command; a broker nobody listens on (the worker must refuse before it connects)."""
    require_celery_extra()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAG_", "DAGSTER_")) and k not in ("PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=str(ROOT), RAG_DATABASE_URL=engine.url.render_as_string(hide_password=False),
               RAG_DAGSTER_PG_URL=dagster_database_url(), RAG_CELERY_BROKER_URL="redis://127.0.0.1:9/0",
               DAGSTER_HOME=str(tmp_path / "home"), PYTHONWARNINGS="ignore")
    (tmp_path / "empty").mkdir()
    written = _run([sys.executable, "-m", "rag_pipeline.defs.workers", "config", env["DAGSTER_HOME"]], env, tmp_path)
    assert written.returncode == 0, written.stderr
    return env


def _run(argv, env, tmp_path, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, cwd=tmp_path / "empty", capture_output=True, text=True, timeout=timeout)


def _worker(env, tmp_path) -> subprocess.CompletedProcess:
    return _run([str(BIN / "celery"), "-A", "rag_pipeline.defs.workers.celery_app", "worker", "-n", "w@%h", "-Q",
                 "dagster", "-P", "threads", "-c", "1"], env, tmp_path, timeout=180)


@pytest.mark.slow  # real worker processes loading the models
def test_the_shipped_config_is_the_deployments_and_the_instance_check_says_ok(worker_env, tmp_path):
    written = Path(worker_env["DAGSTER_HOME"]) / "dagster.yaml"
    assert written.read_text() == (ROOT / "deploy/celery/dagster.yaml").read_text()
    proc = _run([sys.executable, "-m", "rag_pipeline.defs.instance"], worker_env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok: the Dagster instance of DAGSTER_HOME="), proc.stdout
    assert "run launcher RagCeleryRunLauncher, pools rag_db and rag_answers ready" in proc.stdout
    check = _run([sys.executable, "-m", "rag_pipeline.defs.workers", "check"], worker_env, tmp_path)
    assert check.returncode == 0, check.stderr
    assert check.stdout.startswith("ok: database: reachable at "), check.stdout
    assert "model all-minilm-l6-v2 (strategies hybrid-bm25-minilm-exact-v1, " in check.stdout


@pytest.mark.slow  # real worker processes loading the models
def test_a_worker_without_the_minilm_extra_refuses_to_start_naming_it(worker_env, tmp_path):
    """As on a machine where only the bare package is installed: sentence-transformers does not import."""
    shadow = tmp_path / "no_minilm"
    shadow.mkdir()
    (shadow / "sentence_transformers.py").write_text("raise ImportError('No module named sentence_transformers')\n")
    env = {**worker_env, "PYTHONPATH": f"{shadow}{os.pathsep}{ROOT}"}
    proc = _worker(env, tmp_path)
    assert proc.returncode != 0
    assert "missing model all-minilm-l6-v2 (strategies hybrid-bm25-minilm-exact-v1, " in proc.stderr, proc.stderr
    assert "the 'minilm' extra of rag-pipeline-eval" in proc.stderr
    assert "not started (1 missing)" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow  # real worker processes loading the models
def test_a_worker_refuses_a_missing_cross_encoder_folder_and_an_unset_database(worker_env, tmp_path):
    strategies = tmp_path / "strategies.yaml"
    strategies.write_text((ROOT / "rag_pipeline/retrieval/strategies.yaml").read_text() + """
  - version: rerank-ce-v1
    embedding_model: use-multilingual-v3
    rerank: {method: cross-encoder, model: /nonexistent/ce-model}
""")
    proc = _worker({**worker_env, "RAG_STRATEGIES_FILE": str(strategies)}, tmp_path)
    assert proc.returncode != 0
    assert "missing strategy rerank-ce-v1: its cross-encoder folder /nonexistent/ce-model is not on this " \
           "machine" in proc.stderr, proc.stderr
    unset = _worker({k: v for k, v in worker_env.items() if k != "RAG_DATABASE_URL"}, tmp_path)
    assert unset.returncode != 0
    assert "missing RAG_DATABASE_URL is not set" in unset.stderr, unset.stderr
    no_home = _worker({k: v for k, v in worker_env.items() if k != "RAG_DAGSTER_PG_URL"}, tmp_path)
    assert no_home.returncode != 0
    assert "cannot load the Dagster instance of DAGSTER_HOME" in no_home.stderr, no_home.stderr
    assert "Traceback" not in unset.stderr + no_home.stderr
