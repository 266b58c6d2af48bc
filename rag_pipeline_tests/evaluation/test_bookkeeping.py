"""Run bookkeeping: the heartbeat thread keeps a run alive through a batch slower than the stale limit,
``finished_at`` is the real end, reader counts beyond the pool or the server are refused (nothing written),
``--readers`` sizes the CLI's pool, and the timings say which are wall time and which are summed over threads."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from rag_pipeline.cli import main
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import EXTRA_CONNECTIONS, TIMING_KEYS, evaluate_dataset
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline.storage.engine import get_engine
from rag_pipeline.storage.snapshot_readers import TooManyReadersError, reader_count
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, table_counts, tiny_cases, write_dataset
from rag_pipeline_tests.reliability_helpers import blocked_writes


@pytest.fixture(scope="module")
def tiny(engine, tmp_path_factory):
    folder = tmp_path_factory.mktemp("bookkeeping")
    name = "bookkeeping-kb"
    chunks = ingest_tiny_kb(engine, name, folder / "docs")
    return write_dataset(folder / "d.json", name, tiny_cases(chunks), name="bookkeeping")


def _abandoned_runs_of(engine, dataset_name: str) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text(
            "SELECT count(*) FROM retrieval_evaluation_runs r JOIN retrieval_evaluation_datasets d "
            "ON d.id = r.dataset_id WHERE d.name = :name AND r.status = 'abandoned'"), {"name": dataset_name}).scalar()


def test_a_batch_slower_than_the_stale_limit_still_succeeds(engine, tiny, monkeypatch):
    monkeypatch.setenv("RAG_RUN_STALE_SECONDS", "5")  # heartbeat every second
    dataset = load_dataset(tiny)
    outcome, errors = [], []

    def evaluate() -> None:
        try:
            outcome.append(evaluate_dataset(engine, dataset, get_strategy("keyword-v1"), batch_size=100))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    abandoned_before = _abandoned_runs_of(engine, dataset.name)
    with blocked_writes("retrieval_evaluation_case_results"):  # the single batch's write waits here
        worker = threading.Thread(target=evaluate)
        worker.start()
        held_until = time.monotonic() + 12  # more than twice the stale limit
        while time.monotonic() < held_until:
            run_records.sweep_gone(engine)  # what every other process's next run does (other tests' runs may go)
            run_records.sweep_abandoned(engine)
            time.sleep(0.3)
        abandoned_during = _abandoned_runs_of(engine, dataset.name) - abandoned_before
        released = time.time()
    worker.join(timeout=120)
    assert not errors, errors
    assert abandoned_during == 0, "the heartbeat thread kept the run fresh (neither lost nor abandoned)"
    with engine.connect() as conn:
        run = run_records.get_run(conn, outcome[0].run_id)
    assert run.status == "succeeded" and run.is_current
    assert run.finished_at.timestamp() >= released - 0.5, "finished_at is the end of the run, not its write's start"
    assert (run.finished_at - run.started_at).total_seconds() >= 11.5
    assert set(run.timings) == set(TIMING_KEYS)
    assert run.timings["total_s"] >= run.timings["retrieval_wall_s"] >= 11.5


def test_readers_beyond_the_pool_are_refused_before_anything_is_written(engine, tiny):
    capacity = engine.pool.size() + engine.pool._max_overflow
    before = table_counts(engine)
    readers = capacity - EXTRA_CONNECTIONS + 1
    with pytest.raises(TooManyReadersError, match=rf"needs {capacity + 1} database connections .* at most {capacity}"):
        evaluate_dataset(engine, load_dataset(tiny), get_strategy("keyword-v1"), readers=readers)
    huge = get_engine(readers=reader_count(500))
    with pytest.raises(TooManyReadersError, match=r"the server has \d+ free .*raise max_connections"):
        evaluate_dataset(huge, load_dataset(tiny), get_strategy("keyword-v1"), readers=500)
    assert table_counts(engine) == before


def test_cli_readers_size_the_pool(engine, tiny, capsys):
    capacity = engine.pool.size() + engine.pool._max_overflow
    readers = capacity - EXTRA_CONNECTIONS + 1  # more than the default engine serves
    assert main(["evaluate", "--dataset", str(tiny), "--strategy", "keyword-v1", "--readers", str(readers),
                 "--batch-size", "1", "--quiet"]) == 0
    capsys.readouterr()
    with engine.connect() as conn:
        summary = conn.execute(sa.text(
            "SELECT summary FROM retrieval_evaluation_runs r JOIN retrieval_evaluation_datasets d "
            "ON d.id = r.dataset_id WHERE d.name = 'bookkeeping' ORDER BY r.started_at DESC LIMIT 1")).scalar_one()
    assert summary["readers"] == readers


def _set_status(engine, run_id, status: str, error: str | None = None) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE retrieval_evaluation_runs SET status = :s, error = :e WHERE id = :id"),
                     {"s": status, "e": error, "id": run_id})


def test_a_retried_step_resumes_its_queued_row_or_a_new_one_with_honest_history(engine, tiny):
    """What a retry of a queued run's Dagster step evaluates (run_records.resume_queued_run), by the state its
    failed attempt left: still queued → that row; left running (database down) or failed → that row ends failed
    with why and "retried as <new row>", the new row queued for the same Dagster run; a later retry follows the
    newest row; succeeded → that row, stored; a row of another Dagster run → refused."""
    from rag_pipeline.service.datasets import register_dataset
    from rag_pipeline.service.queued_runs import queue_evaluations

    stored = register_dataset(engine, tiny)
    (queued,) = queue_evaluations(engine, "bookkeeping-kb", stored.dataset_id, ["keyword-v1"]).runs
    dagster_run = queued.dagster_run_id
    first = run_records.resume_queued_run(engine, queued.run_id, dagster_run_id=dagster_run)
    assert (str(first.run_id), first.stored, first.ended) == (queued.run_id, False, None), "never started: same row"
    with pytest.raises(run_records.RunNotQueuedError, match="is not a run of Dagster run"):
        run_records.resume_queued_run(engine, queued.run_id, dagster_run_id="another-dagster-run")

    _set_status(engine, queued.run_id, "running")  # the attempt started it, then the database went away
    second = run_records.resume_queued_run(engine, queued.run_id, dagster_run_id=dagster_run,
                                           attempt_error="psycopg.errors.AdminShutdown: terminating connection\n")
    assert second.ended is not None and str(second.ended) == queued.run_id and not second.stored
    with engine.connect() as conn:
        old, new = (run_records.get_run(conn, i) for i in (queued.run_id, second.run_id))
    assert (old.status, old.is_current, old.finished_at is not None) == ("failed", False, True)
    assert old.error == ("its step attempt ended while the database was unreachable, so it could not record why: "
                         f"psycopg.errors.AdminShutdown: terminating connection; retried as evaluation run "
                         f"{second.run_id}")
    assert new.status == "queued" and new.queued_at is not None and new.queued_at >= old.queued_at
    assert (new.dagster_run_id, new.partition_key, new.strategy_version, new.params_hash, new.dataset_id) == \
        (old.dagster_run_id, old.partition_key, old.strategy_version, old.params_hash, old.dataset_id)
    again = run_records.resume_queued_run(engine, queued.run_id, dagster_run_id=dagster_run)
    assert again.run_id == second.run_id and again.ended is None, "a later retry takes the newest row"

    _set_status(engine, second.run_id, "failed", "OperationalError: the connection is lost")
    third = run_records.resume_queued_run(engine, queued.run_id, dagster_run_id=dagster_run)
    with engine.connect() as conn:
        assert run_records.get_run(conn, second.run_id).error == (
            f"OperationalError: the connection is lost; retried as evaluation run {third.run_id}")
    _set_status(engine, third.run_id, "succeeded")
    done = run_records.resume_queued_run(engine, queued.run_id, dagster_run_id=dagster_run)
    assert (done.run_id, done.stored, done.ended) == (third.run_id, True, None), "stored: not evaluated again"
    with engine.connect() as conn:
        history = run_records.list_runs(conn, dataset="bookkeeping", strategy="keyword-v1",
                                        run_ids=[queued.run_id, second.run_id, third.run_id])
    assert [r.status for r in history] == ["succeeded", "failed", "failed"]
