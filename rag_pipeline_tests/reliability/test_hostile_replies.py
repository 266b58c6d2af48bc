"""Hostile endpoint replies and hostile answer-scoring files: each is one case's error (or a clear flag error),
never the end of the whole collection, and nothing a reader would refuse is ever written.

Replies come from a real HTTP server on 127.0.0.1 (``answers/rag_endpoint_server.py``). Each hostile reply
answers one case; the collection goes on, the case's line says why in words (no Python hint), every line is
accepted by both readers (resume, ``answers evaluate``), and a resume asks only the hostile cases again
(docs/answers-collection.md, docs/failure-behaviour.md).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rag_pipeline.answers.answers_file import read_answers
from rag_pipeline.answers.collection.answers_writer import read_existing
from rag_pipeline.contracts.answers import EndpointConfig
from rag_pipeline.service.answer_collection import collect_answers
from rag_pipeline_tests.answers.collect_helpers import read_lines, write_dataset
from rag_pipeline_tests.answers.rag_endpoint_server import RagEndpoint
from rag_pipeline_tests.reliability.test_hostile_files import (
    HOSTILE,
    assert_clear_user_error,
    cli,
    hostile,
    never_opened,
)

DEEP = 100_000
DIGITS = b"9" * 10_000

# name: (reply body, extra reply headers, a fragment of the case's error; None: the case is answered)
HOSTILE_REPLIES: dict[str, tuple[bytes, dict[str, str], str | None]] = {
    "deep_array": (b"[" * DEEP + b"]" * DEEP, {}, "the reply is JSON nested too deeply to read"),
    "deep_object": (b'{"answer":' * DEEP + b'"x"' + b"}" * DEEP, {}, "the reply is JSON nested too deeply to read"),
    "huge_int_answer": (b'{"answer": ' + DIGITS + b"}", {},
                        "the answer at 'answer' is an integer of 10,000 digits, expected a string"),
    "huge_int_citation": (b'{"answer": "x", "citations": [-' + DIGITS + b"]}", {},
                          "citations at 'citations': item [0] is an integer of 10,000 digits"),
    "huge_int_elsewhere": (b'{"answer": "fine", "tokens": ' + DIGITS + b"}", {}, None),  # a field nobody reads
    "nul_answer": (json.dumps({"answer": "a\u0000b"}).encode(), {},
                   "field 'answer': contains a NUL character (\\u0000), which PostgreSQL cannot store"),
    "nul_citation": (json.dumps({"answer": "a", "citations": ["c\u0000"]}).encode(), {},
                     "field 'cited_chunk_ids[0]': contains a NUL character"),
    "nul_context": (json.dumps({"answer": "a", "contexts": ["ok", "\u0000"]}).encode(), {},
                    "field 'retrieved_chunk_ids[1]': contains a NUL character"),
    "lone_surrogate": (b'{"answer": "\\ud800"}', {}, "answer: Input should be a valid string"),
    "line_over_1_mb": (json.dumps({"answer": "a", "citations": ["c" * 1100] * 1000}).encode(), {},
                       "the answer line would be 1.1 MB; an answers line is at most 1 MB"),
    "bad_gzip": (b"this is not gzip", {"Content-Encoding": "gzip"}, "the reply could not be handled: DecodingError"),
}
PYTHON_HINTS = ("sys.", "set_int_max_str_digits", "Traceback", "maximum recursion depth", "Exceeds the limit")

# Retry-After values that are not delay-seconds or an HTTP date (the backoff is used) or that ask for ages (capped)
HOSTILE_RETRY_AFTER = ("²", "nan", "inf", "-1", "1e309", "1.5", "0x10", "9" * 5000, "9" * 25, "")


def _config(url: str, **overrides) -> EndpointConfig:
    return EndpointConfig(url=url, **{"backoff_s": 0.05, "timeout_s": 10.0, "retries": 1, "concurrency": 4,
                                      **overrides})


def test_each_hostile_reply_is_its_cases_error_and_resume_asks_only_those(tmp_path: Path) -> None:
    names = list(HOSTILE_REPLIES)
    dataset = write_dataset(tmp_path, len(names) + 2)
    case_of = {name: f"case-{i:03d}" for i, name in enumerate(names)}
    bodies = {name: (body, headers) for name, (body, headers, _) in HOSTILE_REPLIES.items()}
    out = tmp_path / "answers.jsonl"
    with RagEndpoint({case_of[n]: [f"raw:{n}"] for n in names}, raw=bodies) as server:
        result = collect_answers(dataset, out, endpoint=_config(server.url))
        lines = {line["case_id"]: line for line in read_lines(out)}
        assert len(lines) == len(names) + 2 and result.status == "succeeded"
        for name, (_, _, fragment) in HOSTILE_REPLIES.items():
            line = lines[case_of[name]]
            if fragment is None:
                assert line["status"] == "ok", (name, line.get("error"))
                continue
            assert line["status"] == "error" and fragment in line["error"], (name, line["error"][:300])
            assert not any(hint in line["error"] for hint in PYTHON_HINTS), (name, line["error"][:300])
        assert lines[f"case-{len(names):03d}"]["status"] == "ok"
        errors = sum(f is not None for _, _, f in HOSTILE_REPLIES.values())
        assert (result.errors, result.answered) == (errors, len(names) + 2 - errors)
        assert max(len(x) for x in out.read_bytes().splitlines(keepends=True)) <= 1024 * 1024
        case_ids = [f"case-{i:03d}" for i in range(len(names) + 2)]
        assert set(read_answers(out, case_ids=case_ids).records) == set(case_ids)  # `answers evaluate` reads it
        assert read_existing(out, set(case_ids), None).dropped_errors == errors  # and resume does
        asked = dict(server.requests)
        server.plan = {}  # the endpoint is fixed: resume asks the error cases again, and only those
        again = collect_answers(dataset, out, endpoint=_config(server.url))
    assert (again.status, again.skipped_existing, again.answered) == ("succeeded", len(names) + 2 - errors, errors)
    retried = {c for c in case_ids if server.requests[c] > asked[c]}
    assert retried == {case_of[n] for n, (_, _, f) in HOSTILE_REPLIES.items() if f is not None}
    assert all(line["status"] == "ok" for line in read_lines(out))


def test_a_hostile_retry_after_falls_back_to_the_backoff_or_the_cap(tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path, len(HOSTILE_RETRY_AFTER))
    plan = {f"case-{i:03d}": [f"429:{value}", "ok"] for i, value in enumerate(HOSTILE_RETRY_AFTER)}
    out = tmp_path / "answers.jsonl"
    with RagEndpoint(plan) as server:
        start = time.monotonic()
        result = collect_answers(dataset, out, endpoint=_config(server.url, max_wait_s=1.0, retries=1,
                                                               concurrency=len(plan)))
        elapsed = time.monotonic() - start
    lines = read_lines(out)
    assert result.status == "succeeded" and result.answered == len(plan)
    assert [line["attempts"] for line in lines] == [2] * len(plan)
    assert all(server.requests[c] == 2 for c in plan)
    assert elapsed < 8  # at most the 1 s cap per case, all in parallel; not 10**5000 s, not a crash


@pytest.mark.parametrize("kind", [*HOSTILE, "missing"])
def test_hostile_refusal_phrases_file_is_a_clear_flag_error(tmp_path: Path, capsys, kind: str) -> None:
    path = tmp_path / "phrases.txt" if kind == "missing" else hostile(kind, tmp_path, "phrases.txt")
    with never_opened(path):  # not read, so it cannot block (a FIFO) or run on forever (/dev/zero)
        rc, out, err = cli(capsys, "answers", "evaluate", "--knowledge-base", "kb", "--dataset",
                           str(tmp_path / "d.json"), "--answers", str(tmp_path / "a.jsonl"), "--quiet",
                           "--refusal-phrases", str(path))
    reason = "no such file" if kind == "missing" else "not a regular file"
    assert rc == 2 and "rag-pipeline: error: --refusal-phrases " in err, err
    assert_clear_user_error(rc, out, err, f"--refusal-phrases {path}", reason)


def test_a_refusal_phrases_file_over_1_mb_is_refused_by_size(tmp_path: Path, capsys) -> None:
    path = tmp_path / "phrases.txt"
    with path.open("wb") as f:  # sparse
        f.truncate(3 * 1024 * 1024)
    rc, out, err = cli(capsys, "answers", "evaluate", "--knowledge-base", "kb", "--dataset", str(tmp_path / "d.json"),
                       "--answers", str(tmp_path / "a.jsonl"), "--quiet", "--refusal-phrases", str(path))
    assert rc == 2, err
    assert_clear_user_error(rc, out, err, f"--refusal-phrases {path}: the refusal phrases file is 3.0 MB; the limit "
                                          "is 1 MB")
