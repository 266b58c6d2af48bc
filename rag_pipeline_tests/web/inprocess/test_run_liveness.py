"""Runs never stay ``running`` once their process is gone: a run whose process on this host ended without
recording the outcome (exit 3 while the database was down, kill -9) ends ``failed`` with the reason at the next
check (``runs``). A run whose Dagster run ended: rag_pipeline_tests/defs/test_queued_evaluations.py."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
import sqlalchemy as sa

from rag_pipeline.cli.main import main
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.evaluation.runs.owner import host
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline.service import evaluations, stored_datasets
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, tiny_cases, write_dataset

NAME = "liveness"


@pytest.fixture(scope="module")
def stored(engine, tmp_path_factory) -> tuple[str, str, str]:
    """(knowledge base, dataset id, knowledge base id) of a tiny evaluated knowledge base of its own."""
    kb = f"liveness-{uuid.uuid4().hex[:8]}"
    folder = tmp_path_factory.mktemp("liveness")
    chunks = ingest_tiny_kb(engine, kb, folder / "docs")
    path = write_dataset(folder / "ds.json", kb, tiny_cases(chunks), name=NAME)
    evaluations.evaluate(engine, evaluations.plan_evaluation(engine, path, ("keyword-v1",), knowledge_base=kb))
    dataset = stored_datasets.find_dataset(engine, kb, NAME, None)
    with engine.connect() as conn:
        kb_id = conn.execute(sa.text("SELECT id FROM knowledge_bases WHERE name = :n"), {"n": kb}).scalar_one()
    return kb, dataset.dataset_id, kb_id


def _row(engine, run_id) -> sa.Row:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT status, error, params_hash, owner_pid FROM retrieval_evaluation_runs "
                                    "WHERE id = :id"), {"id": run_id}).one()


def _params_hash(engine) -> str:
    with engine.connect() as conn:
        return run_records.list_runs(conn, dataset=NAME)[0].params_hash


def test_a_run_whose_process_is_gone_is_listed_failed_with_why(engine, stored, capsys):
    """The row of a CLI evaluation whose process exited without recording the outcome (exit 3 while the
    database was down): owned by a process of this host that no longer exists."""
    kb, dataset_id, kb_id = stored
    run_id = run_records.create_run(engine, dataset_id=dataset_id, knowledge_base_id=kb_id,
                                    strategy=get_strategy("keyword-v1"), params_hash=_params_hash(engine))
    assert _row(engine, run_id).owner_pid is not None, "the row records its process"
    ended = subprocess.run([sys.executable, "-c", "import psutil; p = psutil.Process(); print(p.pid, p.create_time())"],
                           capture_output=True, text=True, check=True).stdout.split()
    with engine.begin() as conn:  # as if that (now ended) process had made the row
        conn.execute(sa.text("UPDATE retrieval_evaluation_runs SET owner_pid = :p, owner_started_at = :s "
                             "WHERE id = :id"), {"p": int(ended[0]), "s": float(ended[1]), "id": run_id})
    capsys.readouterr()
    assert main(["runs", "--dataset", NAME, "--knowledge-base", kb, "--format", "json"]) == 0
    row = _row(engine, run_id)
    assert row.status == "failed", row
    assert row.error.startswith(f"its process (pid {ended[0]} on {host()}) ended without recording the outcome"), row
    assert str(run_id) in capsys.readouterr().out


def test_a_live_process_and_a_reused_pid_are_told_apart(engine, stored):
    kb, dataset_id, kb_id = stored
    strategy, params_hash = get_strategy("keyword-v1"), _params_hash(engine)
    live = run_records.create_run(engine, dataset_id=dataset_id, knowledge_base_id=kb_id, strategy=strategy,
                                  params_hash=params_hash)
    reused = run_records.create_run(engine, dataset_id=dataset_id, knowledge_base_id=kb_id, strategy=strategy,
                                    params_hash=params_hash)
    with engine.begin() as conn:  # this pid, but a process started an hour before this one: not the same process
        conn.execute(sa.text("UPDATE retrieval_evaluation_runs SET owner_started_at = owner_started_at - 3600 "
                             "WHERE id = :id"), {"id": reused})
    run_records.sweep_gone(engine)
    assert _row(engine, live).status == "running"
    assert _row(engine, reused).status == "failed"
    run_records.fail_running(engine, live, "test over")
