"""Faults on a real PostgreSQL: database unreachable at start, connections terminated mid-run
(``pg_terminate_backend`` from another session), the process killed with SIGKILL mid-run, and the
Dagster retry policy (transient database errors only). Nothing partial may ever read as a good run."""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from rag_pipeline.definitions import defs
from rag_pipeline.defs.evaluation import RETRY_POLICY, evaluation_dataset, evaluation_run, fail_fast_unless_transient
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.evaluation.datasets.load import DatasetError, load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.evaluation.metrics import METRIC_NAMES
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.evaluation.runs.lifecycle import mark_failed
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline.service.datasets import register_dataset
from rag_pipeline.service.queued_runs import queue_evaluations
from rag_pipeline.storage import embedded_server
from rag_pipeline.storage.engine import TRANSIENT_ERRORS, DatabaseError, get_engine
from rag_pipeline_tests.eval_helpers import run_rows, table_counts, tiny_cases, write_dataset
from rag_pipeline_tests.reliability_helpers import (
    admin,
    assert_no_partial_succeeded_runs,
    backends,
    blocked_writes,
    cli_evaluation_held_mid_run,
    closed_tcp_port,
    kb_counts,
    tagged_engine,
    tagged_url,
    terminate,
    wait_until,
    waiting_on,
)

ROOT = Path(__file__).resolve().parents[2]
KB = "faults-tiny"
BIN = Path(sys.executable).parent
SECRET = "s3cr%40t-pw"  # percent-encoded "s3cr@t-pw"
# What libpq/psycopg report when the server ends a session (depends on what the client was doing).
DROPPED = r"terminating connection due to administrator command|the connection is lost|server closed the connection"


def _run(engine, run_id) -> sa.Row:
    with engine.connect() as conn:
        return run_records.get_run(conn, run_id)


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# --- database unreachable at start ----------------------------------------------------------------

def _unreachable_urls() -> dict[str, tuple[str, str]]:
    """name → (RAG_DATABASE_URL with a password, the masked form the message must show)."""
    port = closed_tcp_port()
    return {
        "closed-tcp-port": (f"postgresql://alice:{SECRET}@127.0.0.1:{port}/rag",
                            f"postgresql+psycopg://alice:***@127.0.0.1:{port}/rag"),
        "missing-socket-dir": (f"postgresql://alice:{SECRET}@/rag?host=/nonexistent/rag-socket-dir",
                               "postgresql+psycopg://alice:***@/rag?host=/nonexistent/rag-socket-dir"),
    }


@pytest.mark.parametrize("where", ["closed-tcp-port", "missing-socket-dir"])
def test_unreachable_database_is_one_masked_line_for_every_command(where, tmp_path, monkeypatch, capsys):
    from rag_pipeline.cli import main

    url, masked = _unreachable_urls()[where]
    monkeypatch.setenv("RAG_DATABASE_URL", url)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("some text\n", encoding="utf-8")
    commands = [
        ["evaluate", "--dataset", str(ROOT / "datasets" / "demo.json"), "--quiet"],
        ["ingest", str(docs), "--knowledge-base", "kb"],
        ["runs"],
        ["show", str(uuid.uuid4())],
        ["kb", "kb"],
        ["doc", "a.md", "--knowledge-base", "kb", "--status", "READY"],
    ]
    for argv in commands:
        assert main(argv) == 2, argv
        captured = capsys.readouterr()
        line = _one_line_error(captured.err)
        assert line.startswith(f"rag-pipeline: error: cannot reach the database {masked}"), (argv, line)
        assert "s3cr" not in captured.err + captured.out, "the password is never printed"


@pytest.mark.slow  # CLI processes
def test_unreachable_database_in_a_real_process(tmp_path):
    """The installed ``rag-pipeline`` command: exit code, a single stderr line, no traceback."""
    url, masked = _unreachable_urls()["closed-tcp-port"]
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("some text\n", encoding="utf-8")
    env = {**os.environ, "RAG_DATABASE_URL": url}
    for argv in (["evaluate", "--dataset", str(ROOT / "datasets" / "demo.json"), "--quiet"],
                 ["ingest", str(docs), "--knowledge-base", "kb"]):
        proc = subprocess.run([str(BIN / "rag-pipeline"), *argv], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=180)
        assert proc.returncode == 2, proc.stderr
        line = _one_line_error(proc.stderr)
        assert line.startswith(f"rag-pipeline: error: cannot reach the database {masked}: "), line
        assert "Connection refused" in line
        assert "s3cr" not in proc.stderr + proc.stdout


# --- connection dropped mid-run --------------------------------------------------------------------

@pytest.mark.parametrize("victim", ["reader", "writer", "all"])
def test_connection_terminated_mid_run_fails_the_run_and_keeps_nothing(engine, chunks, tmp_path, victim):
    """After two batches (their pools sent into the run's one open COPY, inside its transaction) another session
    terminates the run's REPEATABLE READ readers (both: later batches use either), its writer (the backend running
    that COPY), or every connection of the process. Batches of one case: the fifth batch is submitted only after
    the kill."""
    path = write_dataset(tmp_path / "ds.json", KB, tiny_cases(chunks), name=f"faults-drop-{victim}")
    dataset = load_dataset(path)
    strategy = get_strategy("hybrid-v1")
    good = evaluate_dataset(engine, dataset, strategy, batch_size=2)
    before = kb_counts(engine)
    run_engine, app = tagged_engine(f"drop-{victim}")
    seen = {}

    def progress(done: int, _total: int) -> None:
        if done != 2:
            return
        with admin() as conn:
            rows = backends(conn, app)
            seen["rows"] = rows
            copying = {r.pid for r in rows if (r.query or "").startswith("COPY retrieval_evaluation_candidate_rows")}
            if victim == "reader":  # in a transaction (idle or running a batch), never written
                pids = [r.pid for r in rows if r.state in ("idle in transaction", "active") and not r.has_written
                        and r.pid not in copying]
            elif victim == "writer":
                pids = list(copying)
            else:
                pids = [r.pid for r in rows]
            assert pids, rows
            terminate(conn, pids)
            seen["pids"] = pids

    try:
        with pytest.raises(sa.exc.DBAPIError, match=DROPPED):
            evaluate_dataset(run_engine, dataset, strategy, batch_size=1, readers=2, progress=progress)
    finally:
        run_engine.dispose()
    assert len(seen["pids"]) == {"reader": 2, "writer": 1, "all": len(seen["rows"])}[victim]
    with engine.connect() as conn:
        history = run_records.list_runs(conn, dataset=dataset.name, strategy=strategy.version)
    assert [r.status for r in history] == ["failed", "succeeded"]
    failed, kept = history
    assert not failed.is_current and failed.finished_at is not None
    assert re.search(DROPPED, failed.error), failed.error
    assert run_rows(engine, failed.id) == (0, 0), "the first batch's rows were rolled back"
    assert str(kept.id) == good.run_id and kept.is_current, "the previous good run stays current"
    assert run_rows(engine, kept.id) == (kept.candidate_count, kept.case_count)
    assert kb_counts(engine) == before
    assert_no_partial_succeeded_runs(engine)


def test_cli_reports_a_dropped_connection_in_one_line(engine, chunks, tmp_path, monkeypatch, capsys):
    """``rag-pipeline evaluate`` whose connections are terminated while it waits on a lock: exit 3, one line."""
    from rag_pipeline.cli import main

    path = write_dataset(tmp_path / "ds.json", KB, tiny_cases(chunks), name="faults-cli-drop")
    url, app = tagged_url("cli-drop")
    monkeypatch.setenv("RAG_DATABASE_URL", url)
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault(
        "rc", main(["evaluate", "--dataset", str(path), "--strategy", "keyword-v1", "--quiet"])))
    with blocked_writes("retrieval_evaluation_case_results") as lock, admin() as conn:
        worker.start()
        wait_until(lambda: any(r.application_name == app for r in waiting_on(conn, lock)), timeout=120,
                   what="the CLI run to reach its first write")
        terminate(conn, [r.pid for r in backends(conn, app)])
    worker.join(timeout=120)
    assert not worker.is_alive()
    assert result["rc"] == 3
    line = _one_line_error(capsys.readouterr().err)
    assert line.startswith("rag-pipeline: error: database error: ") and re.search(DROPPED, line), line
    with engine.connect() as conn:
        (run,) = run_records.list_runs(conn, dataset="faults-cli-drop")
    assert run.status == "failed" and run_rows(engine, run.id) == (0, 0)


# --- Dagster: transient errors are retried, the retry succeeds -------------------------------------

def test_dagster_retries_a_dropped_connection_and_the_retry_succeeds(engine, chunks, datasets):
    write_dataset(datasets / "faults-dg.json", KB, tiny_cases(chunks))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("dataset", ["faults-dg"])
    url, app = tagged_url("dagster-drop")
    killed: dict = {}

    def killer(lock) -> None:
        try:
            with admin() as conn:
                wait_until(lambda: any(r.application_name == app for r in waiting_on(conn, lock)), timeout=120,
                           what="the evaluation step to reach its first write")
                killed["pids"] = [r.pid for r in backends(conn, app)]
                terminate(conn, killed["pids"])
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            killed["error"] = exc
        finally:
            lock.rollback()  # release the barrier: the retry must be able to write

    with blocked_writes("retrieval_evaluation_case_results") as lock:
        thread = threading.Thread(target=killer, args=(lock,))
        thread.start()
        result = dg.materialize([evaluation_dataset, evaluation_run], partition_key="faults-dg|keyword-v1",
                                instance=instance, resources={"rag_db": RagDatabase(url=url)}, raise_on_error=False)
        thread.join(timeout=60)
    assert "error" not in killed, killed.get("error")
    assert killed["pids"]
    assert result.success
    retries = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_UP_FOR_RETRY]
    assert [e.step_key for e in retries] == ["evaluation_run"]
    with engine.connect() as conn:
        history = run_records.list_runs(conn, dataset="faults-dg")
    assert [(r.status, r.is_current) for r in history] == [("succeeded", True), ("failed", False)]
    assert re.search(DROPPED, history[1].error), history[1].error
    assert {r.dagster_run_id for r in history} == {result.run_id}, "both attempts belong to one Dagster run"
    assert run_rows(engine, history[1].id) == (0, 0)
    assert run_rows(engine, history[0].id) == (history[0].candidate_count, 5)
    assert_no_partial_succeeded_runs(engine)


# --- Dagster retries of a queued (HTTP API / console) run -------------------------------------------

def _queue_one_run(engine, chunks, datasets, name: str):
    """A dataset stored as the API stores it, a reference run of keyword-v1 on it (the metrics the retry must
    reproduce; current until the retry succeeds) and one ``queued`` run of keyword-v1, as a click queues it."""
    path = write_dataset(datasets / f"{name}.json", KB, tiny_cases(chunks))
    stored = register_dataset(engine, path)
    reference = evaluate_dataset(engine, load_dataset(path), get_strategy("keyword-v1"))
    (queued,) = queue_evaluations(engine, KB, stored.dataset_id, ["keyword-v1"]).runs
    return stored, reference, queued


def _execute_queued_run(stored, queued, url: str, disrupt) -> dg.ExecuteInProcessResult:
    """Carry out ``queued`` with the ``evaluate_strategies`` job (what the daemon's run worker executes for a
    click), disrupted by ``disrupt`` (:func:`_disrupted`)."""
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("dataset", [queued.dataset])
    return _disrupted(url, disrupt, lambda: defs.resolve_job_def("evaluate_strategies").execute_in_process(
        instance=instance, run_id=queued.dagster_run_id, raise_on_error=False,
        resources={"rag_db": RagDatabase(url=url)},
        run_config={"ops": {"evaluate_click": {"config": {"dataset_id": stored.dataset_id,
                                                          "runs": {"keyword-v1": queued.run_id}}}}}))


def _disrupted(url: str, disrupt, execute):
    """``execute()`` (a Dagster run on ``url``), its first evaluation write held on a lock; ``disrupt(admin_conn,
    lock)`` runs in a thread once the step waits there (its run row ``running``, its transactions open)."""
    app = make_url(url).query["application_name"]
    outcome: dict = {}

    def watcher(lock) -> None:
        try:
            with admin() as conn:
                wait_until(lambda: any(r.application_name == app for r in waiting_on(conn, lock)), timeout=120,
                           what="the evaluation step to reach its first write")
                disrupt(conn, lock)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            outcome["error"] = exc

    with contextlib.suppress(sa.exc.DBAPIError), blocked_writes("retrieval_evaluation_case_results") as lock:
        thread = threading.Thread(target=watcher, args=(lock,))
        thread.start()
        result = execute()
        thread.join(timeout=120)
    assert "error" not in outcome, outcome.get("error")
    return result


def _assert_one_failed_attempt_then_a_succeeded_retry(engine, result, stored, reference, queued, dropped: str):
    """The step failed once and was retried; the queued row is ``failed`` with why (and names the row of the
    retry), the retry's row succeeded with the reference's metrics and is the one current run."""
    step = "evaluate_click"
    assert result.success, [e.event_specific_data for e in result.all_events if e.is_step_failure]
    retries = [e.step_key for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_UP_FOR_RETRY]
    assert retries == [step], "one failed attempt, then a retry"
    assert step in {e.step_key for e in result.all_events if e.is_step_success}
    with engine.connect() as conn:
        history = run_records.list_runs(conn, dataset=queued.dataset)
    assert [(r.status, r.is_current) for r in history] == [("succeeded", True), ("failed", False),
                                                           ("succeeded", False)]
    retry, failed, old = history
    assert str(failed.id) == queued.run_id and str(old.id) == reference.run_id
    assert re.search(dropped, failed.error), failed.error
    assert f"retried as evaluation run {retry.id}" in failed.error, failed.error
    assert failed.finished_at is not None and run_rows(engine, failed.id) == (0, 0)
    assert {r.dagster_run_id for r in (retry, failed)} == {queued.dagster_run_id}, "both attempts: one Dagster run"
    assert retry.partition_key == failed.partition_key == f"{queued.dataset}|keyword-v1"
    assert str(retry.dataset_id) == stored.dataset_id and retry.case_count == 5
    assert run_rows(engine, retry.id) == (retry.candidate_count, 5)
    for metric in METRIC_NAMES:
        assert getattr(retry, metric) == pytest.approx(reference.averages[metric]), metric
    summaries = [e for e in result.all_events if e.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION
                 and e.asset_key == dg.AssetKey("evaluation_run_summary")]
    assert [e.materialization.metadata["run_id"].value for e in summaries] == [str(retry.id)]
    assert_no_partial_succeeded_runs(engine)


@pytest.mark.slow  # the Dagster retry waits its policy's delay (0-10 s)
def test_dagster_retries_a_queued_run_whose_connections_are_terminated(engine, chunks, datasets):
    """pg_terminate_backend of every connection of a queued run's step mid-run: the step fails once, the retry
    evaluates (it used to stop at "is failed, not queued; it is not run again")."""
    stored, reference, queued = _queue_one_run(engine, chunks, datasets, "faults-queued-kill")
    url, app = tagged_url("queued-kill")

    def kill(conn, lock) -> None:
        pids = [r.pid for r in backends(conn, app)]
        assert pids
        terminate(conn, pids)
        lock.rollback()  # release the barrier: the retry must be able to write

    result = _execute_queued_run(stored, queued, url, kill)
    _assert_one_failed_attempt_then_a_succeeded_retry(engine, result, stored, reference, queued, DROPPED)


@pytest.mark.slow  # a 5 s database outage, then the Dagster retry's delay
def test_dagster_retries_a_queued_run_across_a_database_restart(engine, chunks, datasets):
    """The database stops for 5 s while a queued run's step is mid-run (it cannot even record the failure: its
    row stays ``running``): the step fails once, the retry ends that row ``failed`` and evaluates."""
    pgdata = _session_pgdata()
    stored, reference, queued = _queue_one_run(engine, chunks, datasets, "faults-queued-restart")
    url, _ = tagged_url("queued-restart")

    result = _execute_queued_run(stored, queued, url, _restart_the_database(pgdata))
    assert embedded_server.is_running(pgdata), "the database is back after its outage"
    _assert_one_failed_attempt_then_a_succeeded_retry(engine, result, stored, reference, queued, UNRECORDED)


UNRECORDED = rf"^its step attempt ended while the database was unreachable, so it could not record why: .*({DROPPED})"


def _session_pgdata() -> Path:
    pgdata = os.environ.get("RAG_PGDATA")
    if os.environ.get("RAG_TEST_DATABASE_URL") or not pgdata:
        pytest.skip("stops the session's embedded server; RAG_TEST_DATABASE_URL names a server this test "
                    "does not own")
    return Path(pgdata)


def _restart_the_database(pgdata):
    def restart(_conn, _lock) -> None:
        assert embedded_server.stop(Path(pgdata))
        try:
            time.sleep(5)  # the outage itself
        finally:
            embedded_server.start(Path(pgdata))

    return restart


@pytest.mark.slow  # a 5 s database outage, then the Dagster retry's delay
def test_dagster_retry_of_a_partition_run_ends_the_row_the_outage_left_running(engine, chunks, datasets):
    """evaluate_retrieval (no queued row: each attempt creates its own) across a 5 s database stop: the first
    attempt's row, which it could not end, is ended ``failed`` with why by the retry, not left ``running``."""
    pgdata = _session_pgdata()
    write_dataset(datasets / "faults-dg-restart.json", KB, tiny_cases(chunks))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("dataset", ["faults-dg-restart"])
    url, _ = tagged_url("dagster-restart")
    result = _disrupted(url, _restart_the_database(pgdata), lambda: dg.materialize(
        [evaluation_dataset, evaluation_run], partition_key="faults-dg-restart|keyword-v1", instance=instance,
        resources={"rag_db": RagDatabase(url=url)}, raise_on_error=False))
    assert result.success
    retries = [e.step_key for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_UP_FOR_RETRY]
    assert retries == ["evaluation_run"]
    with engine.connect() as conn:
        history = run_records.list_runs(conn, dataset="faults-dg-restart")
    assert [(r.status, r.is_current) for r in history] == [("succeeded", True), ("failed", False)]
    assert re.search(UNRECORDED, history[1].error), history[1].error
    assert run_rows(engine, history[1].id) == (0, 0)
    assert run_rows(engine, history[0].id) == (history[0].candidate_count, 5)
    assert_no_partial_succeeded_runs(engine)


def test_retry_policy_is_bounded_and_only_for_transient_database_errors():
    assert evaluation_dataset.op.retry_policy == RETRY_POLICY == evaluation_run.op.retry_policy
    assert 1 <= RETRY_POLICY.max_retries <= 3 and RETRY_POLICY.delay
    # a real connection error and the masked DatabaseError built from it are re-raised (→ retried)
    port = closed_tcp_port()
    with pytest.raises(DatabaseError, match=r"alice:\*\*\*@127.0.0.1") as info:
        get_engine(f"postgresql+psycopg://alice:{SECRET}@127.0.0.1:{port}/rag")
    assert "s3cr" not in str(info.value)
    with pytest.raises(DatabaseError), fail_fast_unless_transient():
        raise info.value
    raw = sa.create_engine(f"postgresql+psycopg://alice@127.0.0.1:{port}/rag")
    with pytest.raises(sa.exc.OperationalError), fail_fast_unless_transient():
        raw.connect()
    assert isinstance(info.value, TRANSIENT_ERRORS)
    # a configuration error (bad URL) is not transient: it fails at once
    with pytest.raises(dg.Failure) as config_failure, fail_fast_unless_transient():
        raise DatabaseError("not a PostgreSQL URL: mysql://x")
    assert config_failure.value.allow_retries is False
    # user errors become a Failure that Dagster does not retry, with the message (and no secret)
    for error in (DatasetError("x.json", []), KnowledgeBaseError("unknown knowledge base 'nope'"),
                  ValueError("a bug")):
        with pytest.raises(dg.Failure) as failure, fail_fast_unless_transient():
            raise error
        assert failure.value.allow_retries is False
        assert str(error) in failure.value.description


def test_dagster_unknown_knowledge_base_fails_once_and_writes_nothing(engine, datasets):
    write_dataset(datasets / "faults-nokb.json", "no-such-kb", [
        {"case_id": "a", "question": "q", "k": 1, "relevant_chunk_ids": [str(uuid.uuid4())]}])
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("dataset", ["faults-nokb"])
    before = table_counts(engine)
    result = dg.materialize([evaluation_dataset, evaluation_run], partition_key="faults-nokb|hybrid-v1",
                            instance=instance, resources={"rag_db": RagDatabase()}, raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert failure.step_key == "evaluation_dataset"
    assert failure.step_failure_data.user_failure_data.description.startswith("unknown knowledge base 'no-such-kb'")
    assert not [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_UP_FOR_RETRY]
    assert table_counts(engine) == before


# --- process killed mid-run -------------------------------------------------------------------------

_QUEUE_TWO_CLICKS = """
import sys, time
from rag_pipeline.service.queued_runs import queue_evaluations
from rag_pipeline.storage.engine import get_engine
engine = get_engine()
for strategy in ("keyword-v1", "bm25-v1"):
    (run,) = queue_evaluations(engine, sys.argv[1], sys.argv[2], [strategy]).runs
    print(run.run_id, run.dagster_run_id, flush=True)
time.sleep(600)
"""


@pytest.mark.slow  # a child process that queues two clicks, then is killed with SIGKILL
def test_queued_runs_of_a_killed_server_are_requested_at_the_next_sensor_tick(engine, chunks, datasets):
    """The server queues a click's runs and answers 202, then is killed (kill -9): nothing of the click was in that
    process, so the daemon's queued_evaluations sensor requests each click's Dagster run at its next tick, once."""
    from rag_pipeline.defs.sensors import queued_evaluations

    stored = register_dataset(engine, write_dataset(datasets / "faults-orphan.json", KB, tiny_cases(chunks)))
    child = subprocess.Popen([sys.executable, "-c", _QUEUE_TWO_CLICKS, KB, stored.dataset_id], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        clicks = [child.stdout.readline().split() for _ in range(2)]
        assert all(len(c) == 2 for c in clicks), child.stderr.read() if child.poll() is not None else clicks
    finally:
        child.kill()
        child.wait(timeout=60)
        child.stdout.close()
        child.stderr.close()
    context = dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral(), resources={"rag_db": RagDatabase()})
    requests = {r.run_key: r for r in queued_evaluations(context).run_requests}
    for run_id, queue_id in clicks:
        assert list(requests[queue_id].run_config["ops"]["evaluate_click"]["config"]["runs"].values()) == [run_id]
        assert _run(engine, run_id).status == "queued"
        mark_failed(engine, run_id, "test over")  # no daemon of this test runs them


@pytest.mark.slow  # a killed evaluation process and a rerun
def test_killed_process_reads_as_failed_at_the_next_check_and_a_rerun_becomes_current(engine, chunks, tmp_path,
                                                                                      monkeypatch, capsys):
    """kill -9 mid-run: the row cannot say why, but its heartbeat stops, so the first check after six missed beats
    (``runs`` here; the sensor, the server's reconcile loop, the next evaluation) marks it failed with that reason.
    Only the database is asked (the process could have run on another machine); its pid is never looked up."""
    from rag_pipeline.cli import main

    name = "faults-killed"
    path = write_dataset(tmp_path / "ds.json", KB, tiny_cases(chunks), name=name)
    app = f"rag-test-killed-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "RAG_RUN_STALE_SECONDS": "10"}  # a beat every 2 s, lost after 10 s
    monkeypatch.setenv("RAG_RUN_STALE_SECONDS", "10")

    def running_run():
        with engine.connect() as conn:
            rows = run_records.list_runs(conn, dataset=name)
        return rows[0] if rows and rows[0].status == "running" else None

    with cli_evaluation_held_mid_run(path, tmp_path, app, env) as proc:
        run = running_run()
        assert run is not None, "the run row is committed as 'running' before any result"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    with admin() as conn:  # the server notices the dead client and rolls its transaction back
        wait_until(lambda: not backends(conn, app), timeout=60, what="the killed process's backends to exit")
    assert run_rows(engine, run.id) == (0, 0)
    wait_until(lambda: _silent_for(engine, run.id) > 11, timeout=60, what="the killed process's heartbeat to age")

    capsys.readouterr()
    assert main(["runs", "--dataset", name, "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(r["run_id"], r["status"], r["is_current"]) for r in listed] == [(str(run.id), "failed", False)]
    assert listed[0]["error"].startswith(f"its process (pid {proc.pid} on "), listed[0]["error"]
    assert "sent no heartbeat for 1" in listed[0]["error"] and "lost after 10 s" in listed[0]["error"]

    assert main(["evaluate", "--dataset", str(path), "--strategy", "keyword-v1", "--quiet"]) == 0
    with engine.connect() as conn:
        history = run_records.list_runs(conn, dataset=name)
    assert [(r.status, r.is_current) for r in history] == [("succeeded", True), ("failed", False)]
    assert run_rows(engine, history[0].id) == (history[0].candidate_count, 5)
    assert_no_partial_succeeded_runs(engine)


def _silent_for(engine, run_id) -> float:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT extract(epoch FROM clock_timestamp() - heartbeat_at)::float FROM "
                                    "retrieval_evaluation_runs WHERE id = :id"), {"id": run_id}).scalar_one()


# --- bad input through Dagster: every malformed file of the corpus ---------------------------------

@pytest.mark.slow  # one Dagster run per malformed dataset
def test_every_malformed_dataset_fails_its_dagster_run_with_the_full_message(engine, datasets):
    """The corpus of ``test_dataset.py`` through the asset: one failed step, the same message as the CLI
    (every problem, naming file / case / field) in the UI, no retry, nothing written."""
    corpus = sorted((ROOT / "rag_pipeline_tests" / "data" / "bad_datasets").glob("*.json"))
    assert len(corpus) >= 30
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("dataset", [p.stem for p in corpus])
    before = table_counts(engine)
    for source in corpus:
        path = datasets / source.name
        shutil.copy(source, path)
        with pytest.raises(DatasetError) as expected:
            load_dataset(path)
        result = dg.materialize([evaluation_dataset, evaluation_run], partition_key=f"{source.stem}|keyword-v1",
                                instance=instance, resources={"rag_db": RagDatabase()}, raise_on_error=False)
        assert not result.success, source.name
        (failure,) = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
        assert failure.step_key == "evaluation_dataset"
        data = failure.step_failure_data.user_failure_data
        assert data.description == str(expected.value), source.name
        assert str(path) in data.description
        assert str(expected.value) in data.metadata["error"].value
        assert not [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_UP_FOR_RETRY]
    assert table_counts(engine) == before
