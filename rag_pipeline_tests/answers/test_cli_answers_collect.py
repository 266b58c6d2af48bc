"""``answers collect`` as a user runs it: bad flags, secrets kept out of everything, kill -9 halfway and resume."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rag_pipeline_tests.answers.collect_helpers import collect_killed_after, read_lines, run_cli, write_dataset
from rag_pipeline_tests.answers.rag_endpoint_server import RagEndpoint

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-Token-9f8e7d"


def lock_path(output: Path) -> Path:
    """The lock file a running collection holds beside its output (docs/answers-collection.md)."""
    return output.with_name(f".{output.name}.lock")


def _subprocess(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rag_pipeline_tests.answers.collect_helpers", *argv], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


@pytest.mark.parametrize(("flags", "message"), [
    (["--request-template", "{not json"], "--request-template is not JSON"),
    (["--header", "A: b", "--header", "Bearer s3cr3t"], "--header number 2: expected 'Name: value'"),
    (["--header", "Authorization: env:COLLECT_TEST_UNSET_VARIABLE"], "'COLLECT_TEST_UNSET_VARIABLE' is not set"),
    (["--answer-path", "a..b"], "--answer-path 'a..b': bad step"),
    (["--citations-path", "x[one]"], "--citations-path 'x[one]': bad step"),
    (["--strategy", "dense-v1"], "--strategy is for --answerer"),
    (["--method", "GET", "--request-template", "{}"], "GET sends none"),
    (["--endpoint", "ftp://host/x"], "expected an http:// or https:// URL"),
])
def test_bad_flags_are_refused_and_nothing_is_written(tmp_path, capsys, flags, message) -> None:
    dataset = write_dataset(tmp_path, 2)
    out = tmp_path / "answers.jsonl"
    code = run_cli(["--dataset", str(dataset), "--endpoint", "http://127.0.0.1:9/rag", "--output", str(out),
                    "--quiet", *flags])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err and "s3cr3t" not in err
    assert not out.exists()


def test_bad_argparse_values_exit_2(tmp_path, capsys) -> None:
    dataset = write_dataset(tmp_path, 1)
    for flags in (["--concurrency", "0"], ["--timeout", "-1"], ["--retries", "99"], ["--method", "DELETE"]):
        with pytest.raises(SystemExit) as exc:
            run_cli(["--dataset", str(dataset), "--endpoint", "http://127.0.0.1:9/", "--output",
                     str(tmp_path / "a.jsonl"), *flags])
        assert exc.value.code == 2
    assert "expected an integer between 1 and 256" in capsys.readouterr().err
    assert not (tmp_path / "a.jsonl").exists()


def test_an_answers_file_of_another_dataset_is_refused_untouched(tmp_path, capsys) -> None:
    out = tmp_path / "answers.jsonl"
    out.write_text('{"case_id": "someone-else", "answer": "x"}\n', encoding="utf-8")
    code = run_cli(["--dataset", str(write_dataset(tmp_path, 1)), "--endpoint", "http://127.0.0.1:9/",
                    "--output", str(out), "--quiet"])
    assert code == 2 and "answers.jsonl:1: case_id 'someone-else' is not a case of the dataset" in (
        capsys.readouterr().err)
    assert out.read_text(encoding="utf-8") == '{"case_id": "someone-else", "answer": "x"}\n'


@pytest.mark.slow  # the collector end to end in a subprocess (its environment holds the token) against a server
def test_an_env_header_is_sent_but_never_printed_or_stored(tmp_path) -> None:
    dataset = write_dataset(tmp_path, 3)
    out = tmp_path / "answers.jsonl"
    plan = {"case-000": ["echo-headers"], "case-001": ["500-echo"]}
    with RagEndpoint(plan) as server:
        proc = _subprocess(["--dataset", str(dataset), "--endpoint", server.url, "--output", str(out),
                            "--header", "Authorization: env:COLLECT_TEST_TOKEN", "--retries", "0"],
                           env={"COLLECT_TEST_TOKEN": SECRET})
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    lines = {line["case_id"]: line for line in read_lines(out)}
    assert "[secret]" in lines["case-000"]["raw_response"]  # the server did get it, and echoed it back
    assert lines["case-001"]["status"] == "error" and "[secret]" in lines["case-001"]["error"]
    for text in (out.read_text(encoding="utf-8"), stdout, stderr):
        assert SECRET not in text
    assert json.loads(stdout)["answered"] == 2 and "answers: 100%" in stderr  # the bar, on stderr
    assert "3/3" in stderr and "errors 33% p50 " in stderr and " p95 " in stderr


@pytest.mark.slow  # a subprocess collecting 40 cases at 0.15 s each, killed and resumed
def test_kill_9_halfway_then_resume_asks_no_answered_case_again(tmp_path) -> None:
    dataset = write_dataset(tmp_path, 40)
    out = tmp_path / "answers.jsonl"
    argv = ["--dataset", str(dataset), "--output", str(out), "--concurrency", "4", "--quiet"]
    plan = {"case-005": ["503", "ok"], "case-017": ["503", "ok"], "case-021": ["503", "ok"], "case-009": ["slow:1"]}
    with RagEndpoint(plan, delay=0.15) as server:
        answered = collect_killed_after([*argv, "--endpoint", server.url], out, 12)
        asked_before = dict(server.requests)
        assert 12 <= len(answered) < 40
        assert run_cli([*argv, "--endpoint", server.url]) == 0
    lines = read_lines(out)
    assert sorted(line["case_id"] for line in lines) == [f"case-{i:03d}" for i in range(40)]
    assert all(line["status"] == "ok" for line in lines)
    for case_id in answered:  # an answered case was not asked again
        assert server.requests[case_id] == asked_before[case_id]
    assert all(server.requests[f"case-{i:03d}"] >= 1 for i in range(40))


@pytest.mark.slow  # a collector subprocess against a real endpoint server while a second one is refused
def test_a_second_collector_on_the_same_output_is_refused_at_once(tmp_path, capsys) -> None:
    dataset = write_dataset(tmp_path, 8)
    out = tmp_path / "answers.jsonl"
    argv = ["--dataset", str(dataset), "--output", str(out), "--concurrency", "1", "--quiet"]
    with RagEndpoint(delay=0.25) as server:
        first = _subprocess([*argv, "--endpoint", server.url])
        deadline = time.monotonic() + 60
        while (not out.exists() or not out.read_bytes().count(b"\n")) and time.monotonic() < deadline:
            time.sleep(0.02)
        start = time.monotonic()
        code = run_cli([*argv, "--endpoint", server.url])
        refused_in = time.monotonic() - start
        err = capsys.readouterr().err
        assert first.wait(timeout=60) == 0, first.communicate()[1]
    assert code == 2 and refused_in < 2, (code, err)
    assert f"--output {out}: another collector is writing this file" in err and "Traceback" not in err
    lines = read_lines(out)
    assert sorted(line["case_id"] for line in lines) == [f"case-{i:03d}" for i in range(8)]  # none lost, none twice
    assert all(line["status"] == "ok" for line in lines)
    assert set(server.requests.values()) == {1}  # the second collector asked nothing
    assert not lock_path(out).exists()  # removed when the collection ended
    stale = tmp_path / "b.jsonl"
    lock_path(stale).write_text("", encoding="utf-8")  # left by a collector killed with -9: holds no lock
    with RagEndpoint() as server:
        assert run_cli(["--dataset", str(dataset), "--output", str(stale), "--quiet", "--endpoint", server.url]) == 0
    assert len(read_lines(stale)) == 8 and not lock_path(stale).exists()


def test_a_resumed_answers_file_keeps_its_mode_and_a_new_one_follows_the_umask(tmp_path) -> None:
    dataset = write_dataset(tmp_path, 3)
    out, private = tmp_path / "answers.jsonl", tmp_path / "private.jsonl"
    old_umask = os.umask(0o022)
    try:
        with RagEndpoint({"case-001": ["404"]}) as server:
            assert run_cli(["--dataset", str(dataset), "--output", str(out), "--quiet", "--endpoint", server.url]) == 0
            assert stat.S_IMODE(out.stat().st_mode) == 0o644
            out.chmod(0o640)
            server.plan = {}
            assert run_cli(["--dataset", str(dataset), "--output", str(out), "--quiet", "--endpoint",
                            server.url]) == 0  # the error line is dropped: the file is written again
            assert server.requests["case-001"] == 2 and server.requests["case-000"] == 1
            os.umask(0o077)
            assert run_cli(["--dataset", str(dataset), "--output", str(private), "--quiet", "--endpoint",
                            server.url]) == 0
    finally:
        os.umask(old_umask)
    assert [line["status"] for line in read_lines(out)] == ["ok"] * 3
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
