"""Collecting from a real HTTP endpoint on 127.0.0.1: retries, per-case errors, caps, timeouts, endpoint down."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator, Sequence

import pytest

from rag_pipeline.answers.collection.endpoint_client import MAX_RESPONSE_BYTES
from rag_pipeline.contracts.answers import MAX_RAW_RESPONSE_CHARS, AnswerRecord, EndpointConfig
from rag_pipeline.service.answer_collection import collect_answers
from rag_pipeline_tests.answers.collect_helpers import read_lines, write_dataset
from rag_pipeline_tests.answers.rag_endpoint_server import RagEndpoint, reply_for


def _config(url: str, **overrides) -> EndpointConfig:
    return EndpointConfig(url=url, **{"backoff_s": 0.05, "timeout_s": 5.0, "retries": 3, **overrides})


def test_injected_faults_are_retried_or_recorded_per_case(tmp_path) -> None:
    dataset = write_dataset(tmp_path, 10)
    plan = {"case-000": ["503", "503", "ok"], "case-001": ["429:1", "ok"], "case-002": ["slow:0.6"],
            "case-003": ["malformed"], "case-004": ["no-answer"], "case-005": ["bad-citations"],
            "case-006": ["404"], "case-007": ["500"], "case-008": ["429-date", "ok"]}
    out = tmp_path / "answers.jsonl"
    with RagEndpoint(plan) as server:
        start = time.perf_counter()
        result = collect_answers(dataset, out, endpoint=_config(server.url, concurrency=4, retries=2))
        elapsed = time.perf_counter() - start
    lines = {line["case_id"]: line for line in read_lines(out)}
    assert sorted(lines) == [f"case-{i:03d}" for i in range(10)]  # every case has its line, once
    ok = {c for c, line in lines.items() if line["status"] == "ok"}
    assert ok == {"case-000", "case-001", "case-002", "case-008", "case-009"}
    assert (result.status, result.answered, result.errors, result.total) == ("succeeded", 5, 5, 10)
    assert server.requests["case-000"] == 3 and lines["case-000"]["attempts"] == 3
    assert server.requests["case-001"] == 2 and elapsed >= 1.0  # Retry-After: 1 was honoured
    assert server.requests["case-008"] == 2
    assert server.requests["case-006"] == 1  # a 4xx is not retried
    assert server.requests["case-007"] == 3 and lines["case-007"]["error"].startswith("HTTP 500: ")
    assert "upstream says 500 for case-007" in lines["case-007"]["error"]
    assert lines["case-002"]["latency_ms"] >= 600
    assert "not JSON" in lines["case-003"]["error"]
    assert "no answer at --answer-path 'answer'" in lines["case-004"]["error"]
    assert "citations at 'citations' is str, expected a list" in lines["case-005"]["error"]
    for line in lines.values():  # every line is a valid answers-file line
        AnswerRecord.model_validate_json(json.dumps(line))
    first = server.bodies[0]  # the template's JSON escaping: the question round-trips exactly
    assert first["question"].startswith('What is "item" ') and "\nSay\\why." in first["question"]
    assert isinstance(first["k"], int)
    assert result.requests == sum(server.requests.values())
    assert result.latency_ms_p50 is not None and result.latency_ms_p95 >= result.latency_ms_p50


def test_cited_ids_that_are_not_uuids_are_kept_as_given(tmp_path) -> None:
    dataset = write_dataset(tmp_path, 2)
    out = tmp_path / "a.jsonl"
    with RagEndpoint() as server:
        collect_answers(dataset, out, endpoint=_config(server.url))
    line = read_lines(out)[0]
    expected = reply_for(line["case_id"], server.bodies[0]["question"])
    assert line["cited_chunk_ids"] == [f"chunk-of-{line['case_id']}"] == expected["citations"]
    assert line["retrieved_chunk_ids"] == expected["contexts"]
    assert json.loads(line["raw_response"])["answer"] == line["answer"]


@pytest.mark.slow  # writes and reads 50 MB over loopback
def test_a_50_mb_reply_is_cut_at_the_cap_while_reading(tmp_path) -> None:
    dataset = write_dataset(tmp_path, 1)
    out = tmp_path / "a.jsonl"
    with RagEndpoint({"case-000": ["huge"]}) as server:
        result = collect_answers(dataset, out, endpoint=_config(server.url, timeout_s=30))
    (line,) = read_lines(out)
    assert line["status"] == "error" and f"longer than {MAX_RESPONSE_BYTES // 2**20} MB" in line["error"]
    assert len(line["raw_response"]) == MAX_RAW_RESPONSE_CHARS and line["raw_response"].startswith('{"answer": "x')
    assert server.requests["case-000"] == 1 and result.errors == 1
    assert out.stat().st_size < 2 * MAX_RAW_RESPONSE_CHARS


def test_a_hanging_endpoint_is_bounded_by_the_timeout(tmp_path) -> None:
    dataset = write_dataset(tmp_path, 2)
    out = tmp_path / "a.jsonl"
    with RagEndpoint({"case-000": ["hang"]}) as server:
        start = time.perf_counter()
        result = collect_answers(dataset, out, endpoint=_config(server.url, timeout_s=0.5, retries=1))
        elapsed = time.perf_counter() - start
    lines = {line["case_id"]: line for line in read_lines(out)}
    assert "no complete reply within --timeout 0.5 s (after 2 attempts)" in lines["case-000"]["error"]
    assert lines["case-001"]["status"] == "ok" and result.status == "succeeded"
    assert elapsed < 4  # 2 attempts x 0.5 s + one 0.05 s backoff, not the server's 60 s


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/rag"


def test_endpoint_down_fails_with_the_reason_and_keeps_the_answered_cases(tmp_path) -> None:
    dataset = write_dataset(tmp_path, 8)
    out = tmp_path / "a.jsonl"
    server = RagEndpoint()
    with server:
        def progress(p) -> None:
            if p.done == 3:
                server.stop()  # the endpoint goes down after 3 answers

        result = collect_answers(dataset, out, endpoint=_config(server.url, concurrency=1, retries=2),
                                 progress=progress)
    assert result.status == "failed" and "the endpoint is unreachable: cannot connect" in result.reason
    assert "after 3 attempts" in result.reason
    lines = read_lines(out)
    assert [line["status"] for line in lines] == ["ok", "ok", "ok", "error"]  # nothing after the failed case
    assert (result.answered, result.errors, result.not_asked) == (3, 1, 4)
    again = collect_answers(dataset, out, endpoint=_config(_closed_port_url(), retries=0))
    assert again.status == "failed" and again.skipped_existing == 3
    assert [line["case_id"] for line in read_lines(out)][:3] == [line["case_id"] for line in lines[:3]]


class _EchoAnswerer:
    """A tiny real answerer of the collector's protocol: answers every case with its question."""

    identity = "echo-test@1"

    def answer_cases(self, cases: Sequence) -> Iterator[AnswerRecord]:
        for case in reversed(cases):
            yield AnswerRecord(case_id=case.case_id, answer=case.question, cited_chunk_ids=["x"])


def test_an_in_process_answerer_writes_the_same_file_and_resumes(tmp_path) -> None:
    dataset = write_dataset(tmp_path, 4)
    out = tmp_path / "a.jsonl"
    result = collect_answers(dataset, out, answerer=_EchoAnswerer())
    lines = read_lines(out)
    assert result.status == "succeeded" and result.answered == 4 and result.answerer == "echo-test@1"
    assert {line["answerer"] for line in lines} == {"echo-test@1"} and all("latency_ms" in x for x in lines)
    again = collect_answers(dataset, out, answerer=_EchoAnswerer())
    assert (again.skipped_existing, again.answered) == (4, 0) and read_lines(out) == lines
