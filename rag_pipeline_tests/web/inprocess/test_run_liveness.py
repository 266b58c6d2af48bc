"""Runs never stay ``running`` once their process is gone: a run whose process ended without recording the
outcome (exit 3 while the database was down, kill -9, a lost machine) stops its heartbeat and ends ``failed`` with
the reason at the next check (``runs``), found by the heartbeat's age alone. A killed process:
rag_pipeline_tests/reliability/test_faults.py; a run whose Dagster run ended:
rag_pipeline_tests/defs/test_queued_evaluations.py."""

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


def _silence(engine, run_id, seconds: float) -> None:
    """As if the row's process had sent its last heartbeat ``seconds`` ago."""
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE retrieval_evaluation_runs SET heartbeat_at = clock_timestamp() - "
                             "make_interval(secs => :s) WHERE id = :id"), {"s": seconds, "id": run_id})


def test_a_run_whose_heartbeat_fell_silent_is_listed_failed_with_why(engine, stored, capsys):
    """The row of an evaluation whose process ended without recording the outcome (kill -9, exit 3 while the
    database was down, a lost machine): its heartbeat is older than six beats."""
    kb, dataset_id, kb_id = stored
    run_id = run_records.create_run(engine, dataset_id=dataset_id, knowledge_base_id=kb_id,
                                    strategy=get_strategy("keyword-v1"), params_hash=_params_hash(engine))
    assert _row(engine, run_id).owner_pid is not None, "the row records its process"
    _silence(engine, run_id, run_records.lost_after_seconds() + 5)
    capsys.readouterr()
    assert main(["runs", "--dataset", NAME, "--knowledge-base", kb, "--format", "json"]) == 0
    row = _row(engine, run_id)
    assert row.status == "failed", row
    assert row.error.startswith(f"its process (pid {row.owner_pid} on {host()}) sent no heartbeat for "), row
    assert str(run_id) in capsys.readouterr().out


def test_only_the_heartbeat_tells_a_process_is_lost_not_its_pid(engine, stored):
    """A row whose recorded pid no longer exists but whose heartbeat is fresh keeps running (the pid may be one of
    another machine); a row one beat late keeps running; one beyond six beats ends failed."""
    kb, dataset_id, kb_id = stored
    strategy, params_hash = get_strategy("keyword-v1"), _params_hash(engine)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True).stdout.strip()
    dead_pid, late, lost = (run_records.create_run(engine, dataset_id=dataset_id, knowledge_base_id=kb_id,
                                                   strategy=strategy, params_hash=params_hash) for _ in range(3))
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE retrieval_evaluation_runs SET owner_pid = :p WHERE id = :id"),
                     {"p": int(ended), "id": dead_pid})
    _silence(engine, late, 2 * run_records.beat_interval())
    _silence(engine, lost, run_records.lost_after_seconds() + 1)
    assert run_records.sweep_gone(engine) >= 1
    assert _row(engine, dead_pid).status == "running"
    assert _row(engine, late).status == "running"
    assert _row(engine, lost).status == "failed"
    for run_id in (dead_pid, late):
        run_records.fail_running(engine, run_id, "test over")
