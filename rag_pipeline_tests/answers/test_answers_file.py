"""The answers-file reader: every bad input refused with its file, line and field; good files read exactly."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from rag_pipeline.answers import answers_file
from rag_pipeline.answers.answers_file import AnswersFileError, parse_answers, read_answers
from rag_pipeline.contracts.errors import EXIT_USER_ERROR, exit_code, http_status

CASES = ["q1", "q2", "q3"]


def _line(**fields) -> str:
    return json.dumps({"case_id": "q1", "answer": "x", **fields}, ensure_ascii=False)


Q1 = "f.jsonl: line 1 (case_id 'q1'): "
BAD = [  # (file text, expected "line N (case_id 'C'): field 'F': message" fragment)
    ('{"case_id": "q1", "answer": 3}\n',
     Q1 + "field 'answer': input should be a valid string, got integer 3"),
    ('{"answer": "x"}\n', "f.jsonl: line 1: field 'case_id': is required"),
    ('{"case_id": "", "answer": "x"}\n', "f.jsonl: line 1: field 'case_id': string should have at least 1 character"),
    ('{"case_id": "nope", "answer": "x"}\n',
     "f.jsonl: line 1 (case_id 'nope'): field 'case_id': \"nope\" is not a case of the dataset"),
    ('{"case_id": "q1"}\n\n{"case_id": "q1"}\n', "f.jsonl: line 3 (case_id 'q1'): field 'case_id': \"q1\" already "
     "answered on line 1"),
    ('{"case_id": "q1", "answer": "x", "answer": "y"}\n', Q1 + "field 'answer': appears "
     "more than once"),
    ('{"case_id": "q1", "latency_ms": NaN}\n',
     Q1 + "field 'latency_ms': non-finite number NaN is not JSON"),
    ('{"case_id": "q1", "latency_ms": -5}\n', Q1 + "field 'latency_ms': input should be greater than or "
                                             "equal to 0, got integer -5"),
    ('{"case_id": "q1", "refused": "yes"}\n', Q1 + "field 'refused': input should be a valid boolean, "
                                             'got string "yes"'),
    ('{"case_id": "q1", "cited_chunk_ids": "abc"}\n', Q1 + "field 'cited_chunk_ids': input should be a "
                                                     "valid list"),
    ('{"case_id": "q1", "cited_chunk_ids": ["a", 7]}\n', Q1 + "field 'cited_chunk_ids[1]': input should "
                                                        "be a valid string, got integer 7"),
    ('{"case_id": "q1", "status": "meh"}\n', Q1 + "field 'status': input should be 'ok' or 'error'"),
    ('{"case_id": "q1", "colour": "red"}\n', Q1 + "field 'colour': is not a field of an answer line"),
    ('{"case_id": "q1"}\n[1, 2]\n', "f.jsonl: line 2: must be a JSON object (one answer per line), got array"),
    ('{"case_id": "q1"}\n{"case_id": \n', "f.jsonl: line 2: invalid JSON at column 13: Expecting value"),
    ('{"case_id": "q1", "answerer": "a@1"}\n{"case_id": "q2", "answerer": "b@1"}\n',
     "f.jsonl: line 2 (case_id 'q2'): field 'answerer': \"b@1\" differs from \"a@1\" on line 1"),
    ("\n  \n", "f.jsonl: has no answer lines"),
    ('{"case_id": "q2", "latency_ms": ' + "9" * 5000 + "}\n",
     "f.jsonl: line 1 (case_id 'q2'): invalid JSON: a number has more than 4300 digits"),
    ('{"case_id": "q3", "answer": "x",,}\n', "f.jsonl: line 1 (case_id 'q3'): invalid JSON at column 33"),
    ('{"case_id": "q1", "attempts": 1.5}\n', Q1 + "field 'attempts': input should be a valid integer"),
    ('{"case_id": "q1", "answer": "a\\u0000b"}\n',
     Q1 + "field 'answer': contains a NUL character (\\u0000), which PostgreSQL "
     "cannot store"),
    ('{"case_id": "q1", "cited_chunk_ids": ["ok", "\\ud800"]}\n',
     Q1 + "field 'cited_chunk_ids[1]': contains an unpaired UTF-16 surrogate"),
]


@pytest.mark.parametrize(("text", "expected"), BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_a_bad_answers_file_is_refused_naming_line_and_field(text: str, expected: str) -> None:
    with pytest.raises(AnswersFileError) as info:
        parse_answers(text.encode(), case_ids=CASES, source="f.jsonl")
    assert expected in str(info.value), str(info.value)
    assert "sys." not in str(info.value) and "set_int_max_str_digits" not in str(info.value), "no Python hint"
    assert exit_code(info.value) == EXIT_USER_ERROR and http_status(info.value) == 422


def test_bytes_that_are_not_utf8_name_the_line() -> None:
    raw = _line().encode() + b"\n" + b'{"case_id": "q2", "answer": "\xff"}\n'
    with pytest.raises(AnswersFileError, match=r"f.jsonl: line 2 \(case_id 'q2'\): not valid UTF-8: byte 0xff"):
        parse_answers(raw, case_ids=CASES, source="f.jsonl")
    with pytest.raises(AnswersFileError, match="UTF-16"):
        parse_answers("\ufeff{}".encode("utf-16"), case_ids=CASES, source="f.jsonl")


def test_every_problem_is_listed_up_to_the_bound() -> None:
    text = "".join(json.dumps({"case_id": f"x{i}"}) + "\n" for i in range(60))
    with pytest.raises(AnswersFileError) as info:
        parse_answers(text.encode(), case_ids=CASES, source="f.jsonl")
    message = str(info.value)
    assert message.startswith("invalid answers file f.jsonl: 60 problems")
    assert "line 50 (case_id 'x49'): field 'case_id'" in message and "line 51 " not in message
    assert message.rstrip().endswith("… and 10 more problems")


def test_checking_stops_after_a_bound_of_problems(monkeypatch) -> None:
    monkeypatch.setattr(answers_file, "MAX_COLLECTED", 5)
    text = "".join(json.dumps({"case_id": f"x{i}"}) + "\n" for i in range(20))
    with pytest.raises(AnswersFileError) as info:
        parse_answers(text.encode(), case_ids=CASES, source="f.jsonl")
    assert len(info.value.problems) == 6
    assert "f.jsonl: line 6: checking stopped after 5 problems" in str(info.value)


def test_a_good_file_keeps_every_line_and_lists_the_cases_without_one(tmp_path) -> None:
    raw = ("\ufeff" + _line(cited_chunk_ids=["A"], answerer="bot@2") + "\n\n"
           + json.dumps({"case_id": "q3", "status": "error", "error": "HTTP 503", "answerer": "bot@2"}) + "\r\n"
           ).encode("utf-8")
    path = tmp_path / "answers.jsonl"
    path.write_bytes(raw)
    parsed = read_answers(path, case_ids=CASES)
    assert list(parsed.records) == ["q1", "q3"]
    assert parsed.records["q1"].cited_chunk_ids == ["A"] and parsed.records["q3"].status == "error"
    assert parsed.answerer == "bot@2" and parsed.missing == ["q2"]
    assert parsed.sha256 == hashlib.sha256(raw).hexdigest()
    assert read_answers(raw, case_ids=CASES, filename="up.jsonl").records == parsed.records


def test_files_that_cannot_be_read_are_refused_with_their_name(tmp_path, monkeypatch) -> None:
    with pytest.raises(AnswersFileError, match=r"missing.jsonl: cannot read the file: no such file"):
        read_answers(tmp_path / "missing.jsonl", case_ids=CASES)
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(AnswersFileError, match="not a regular file"):
        read_answers(fifo, case_ids=CASES)
    monkeypatch.setattr(answers_file, "MAX_FILE_BYTES", 10)
    big = tmp_path / "big.jsonl"
    big.write_text(_line() + "\n", encoding="utf-8")
    with pytest.raises(AnswersFileError, match="the limit is 10 bytes"):
        read_answers(big, case_ids=CASES)
    with pytest.raises(AnswersFileError, match="larger than 10 bytes"):
        parse_answers(big.read_bytes(), case_ids=CASES)
