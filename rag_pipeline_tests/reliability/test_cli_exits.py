"""Odd ways for a ``rag-pipeline`` command to end: SIGTERM mid-run (the run is failed at once, exit 143), a
closed stdout (``| head``: exit 0, no ``Broken pipe``), numeric flags out of range (exit 2 before anything
runs), an ``--output`` that cannot be written (exit 2 before the run), and the current marker of ``runs``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from rag_pipeline.cli import main
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline_tests.eval_helpers import (
    run_rows,
    table_counts,
    tiny_cases,
    write_dataset,
)
from rag_pipeline_tests.reliability_helpers import (
    cli_evaluation_held_mid_run,
)

KB = "exits-tiny"
BIN = Path(sys.executable).parent


@contextlib.contextmanager
def sigint_reaches_children() -> Iterator[None]:
    """Children started in the block take Ctrl-C. A test run started in the background of a non-interactive
    shell (``make test &``, a CI runner) inherits SIGINT *ignored*; ``exec`` keeps an ignored signal ignored and
    Python then installs no KeyboardInterrupt handler, so the CLI child would never see the signal. A handler
    (not ``SIG_IGN``) in this process is reset to the default by ``exec``: the child installs its own."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _catches_sigint(pid: int) -> bool:
    """The process has a SIGINT handler (``SigCgt`` of ``/proc/PID/status``; Linux)."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGINT - 1)))


def _latest_run(engine, dataset: str):
    with engine.connect() as conn:
        rows = run_records.list_runs(conn, dataset=dataset)
    return rows[0] if rows else None


# --- SIGTERM -------------------------------------------------------------------------------------------

def test_sigterm_fails_the_running_run_at_once_and_exits_143(engine, chunks, tmp_path):
    """The process is stopped mid-run (its first write waits on a lock); SIGTERM: the run row reads
    ``failed`` as soon as the process has exited (not ``running`` for RAG_RUN_STALE_SECONDS), no result row
    is kept, one line on stderr, exit 143."""
    name = "exits-sigterm"
    path = write_dataset(tmp_path / "ds.json", KB, tiny_cases(chunks), name=name)
    app = f"rag-test-sigterm-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "RAG_RUN_STALE_SECONDS": "600"}
    with cli_evaluation_held_mid_run(path, tmp_path, app, env) as proc:
        run = _latest_run(engine, name)
        assert run is not None and run.status == "running"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)  # the lock is still held: ending must not need it
        stderr = proc.stderr.read().decode()
        with engine.connect() as c:
            stored = c.execute(sa.text("SELECT status, error, is_current FROM retrieval_evaluation_runs "
                                       "WHERE id = :id"), {"id": run.id}).one()
    assert proc.returncode == 143, stderr
    assert stderr.strip() == "rag-pipeline: terminated", stderr
    assert stored.status == "failed" and not stored.is_current
    assert stored.error.startswith("Terminated: terminated by signal SIGTERM"), stored.error
    assert run_rows(engine, run.id) == (0, 0)


def test_sigint_fails_the_running_run_saying_so_and_exits_130(engine, chunks, tmp_path):
    """Ctrl-C mid-run: the run row reads ``failed`` with a reason that says it was interrupted, not a bare
    ``KeyboardInterrupt``; exit 130."""
    name = "exits-sigint"
    path = write_dataset(tmp_path / "ds.json", KB, tiny_cases(chunks), name=name)
    app = f"rag-test-sigint-{uuid.uuid4().hex[:8]}"
    with sigint_reaches_children(), cli_evaluation_held_mid_run(
            path, tmp_path, app, {**os.environ, "RAG_RUN_STALE_SECONDS": "600"}) as proc:
        run = _latest_run(engine, name)
        assert _catches_sigint(proc.pid), "the CLI child ignores SIGINT"
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        stderr = proc.stderr.read().decode()
    with engine.connect() as c:
        stored = c.execute(sa.text("SELECT status, error FROM retrieval_evaluation_runs WHERE id = :id"),
                           {"id": run.id}).one()
    assert proc.returncode == 130, stderr
    assert stored.status == "failed", stored
    assert stored.error.startswith("interrupted (SIGINT): the process was stopped by Ctrl-C"), stored.error
    assert run_rows(engine, run.id) == (0, 0)


def test_sigterm_handler_is_restored_after_an_in_process_command(engine, chunks, capsys):
    before = signal.getsignal(signal.SIGTERM)
    assert main(["runs", "--dataset", "no-such-dataset-exits"]) == 0
    assert signal.getsignal(signal.SIGTERM) is before


# --- closed stdout -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stored_run(engine, chunks, tmp_path_factory) -> str:
    path = write_dataset(tmp_path_factory.mktemp("exits_ds") / "ds.json", KB, tiny_cases(chunks),
                         name="exits-pipe")
    assert main(["evaluate", "--dataset", str(path), "--strategy", "keyword-v1", "--quiet"]) == 0
    return str(_latest_run(engine, "exits-pipe").id)


@pytest.mark.parametrize("command", [["show", "{run}", "--include-text"], ["runs"], ["runs", "--format", "json"]])
def test_closed_stdout_ends_quietly_with_0(stored_run, tmp_path, command):
    argv = [str(BIN / "rag-pipeline"), *(a.format(run=stored_run) for a in command)]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first byte is written: every write fails with EPIPE
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert err.decode() == ""


def test_piped_into_head_exits_0(stored_run, tmp_path):
    script = f"set -o pipefail; '{BIN / 'rag-pipeline'}' show {stored_run} --include-text | head -1"
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "{"
    assert proc.stderr == ""


# --- numeric flags -------------------------------------------------------------------------------------

HUGE = "9" * 5001


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["runs", "--limit", "1e20"], "--limit"),
        (["runs", "--limit", "100000000000000000000"], "--limit"),
        (["runs", "--limit", "0"], "--limit"),
        (["runs", "--limit", HUGE], "--limit"),
        (["evaluate", "--dataset", "x.json", "--batch-size", "10001"], "--batch-size"),
        (["evaluate", "--dataset", "x.json", "--batch-size", "-1"], "--batch-size"),
        (["evaluate", "--dataset", "x.json", "--readers", "65"], "--readers"),
        (["evaluate", "--dataset", "x.json", "--readers", "two"], "--readers"),
        (["compare", "--dataset", "x", "--margin", "nan"], "--margin"),
        (["compare", "--dataset", "x", "--margin", "inf"], "--margin"),
        (["compare", "--dataset", "x", "--alpha", "0"], "--alpha"),
        (["compare", "--dataset", "x", "--alpha", "1"], "--alpha"),
        (["compare", "--dataset", "x", "--alpha", "1e999"], "--alpha"),
        (["compare", "--dataset", "x", "--resamples", "1000001"], "--resamples"),
        (["tune", "--dataset", "x", "--folds", "1"], "--folds"),
        (["tune", "--dataset", "x", "--folds", HUGE], "--folds"),
        (["tune", "--dataset", "x", "--top", "0"], "--top"),
        (["tune", "--dataset", "x", "--resamples", "0"], "--resamples"),
        (["tune", "--dataset", "x", "--seed", "-1"], "--seed"),
        (["import-beir", "x", "--knowledge-base", "k", "--dataset-out", "o.json", "--k", "1001"], "--k"),
        (["import-beir", "x", "--knowledge-base", "k", "--dataset-out", "o.json", "--k", HUGE], "--k"),
        (["ingest", "x", "--knowledge-base", "k", "--chunk-size", HUGE], "--chunk-size"),
        (["ingest", "x", "--knowledge-base", "k", "--chunk-overlap", "-5"], "--chunk-overlap"),
    ],
)
def test_numeric_flags_out_of_range_are_usage_errors(argv, flag, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert f"error: argument {flag}: expected " in last, err
    assert len(last) < 200, "the value is not echoed whole"
    assert "Traceback" not in err


# --- --output ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("output", ["{tmp}", "{tmp}/a-file.txt/report.json"])
def test_unwritable_output_is_refused_before_the_run(engine, chunks, tmp_path, output, capsys):
    (tmp_path / "a-file.txt").write_text("x", encoding="utf-8")
    path = write_dataset(tmp_path / "ds.json", KB, tiny_cases(chunks), name="exits-output")
    before = table_counts(engine)
    capsys.readouterr()
    assert main(["evaluate", "--dataset", str(path), "--strategy", "keyword-v1", "--quiet",
                 "--output", output.format(tmp=tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rag-pipeline: error: --output ") and len(err.strip().splitlines()) == 1, err
    assert table_counts(engine) == before, "nothing written"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file.txt", "exits-output.json"]


# --- current marker ------------------------------------------------------------------------------------

def test_runs_marks_only_the_current_run(engine, chunks, tmp_path, capsys):
    path = write_dataset(tmp_path / "ds.json", KB, tiny_cases(chunks), name="exits-marker")
    for _ in range(2):
        assert main(["evaluate", "--dataset", str(path), "--strategy", "keyword-v1", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["runs", "--dataset", "exits-marker", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["is_current"] for r in listed] == [True, False]
    assert main(["runs", "--dataset", "exits-marker"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines()[2:] if "keyword-v1" in line]
    marked = [line for line in lines if "succeeded*" in line]
    assert len(lines) == 2 and len(marked) == 1 and listed[0]["run_id"][:8] in marked[0]
