"""The collector's parts on their own: response paths, the request template, Retry-After, the resumable file."""

from __future__ import annotations

import datetime as dt
import json
from email.utils import format_datetime
from pathlib import Path

import pytest

from rag_pipeline.answers.collection.answers_writer import AnswersFileError, AnswersWriter, read_existing
from rag_pipeline.contracts.answers import DEFAULT_REQUEST_TEMPLATE, AnswerRecord
from rag_pipeline.storage.http.request import (
    EndpointConfigError,
    ResolvedHeaders,
    fill_template,
    fill_url,
    parse_template,
)
from rag_pipeline.storage.http.response_paths import PathNotFound, PathSyntaxError, parse_path
from rag_pipeline.storage.http.retry_policy import retry_after_seconds, retryable_status, wait_before_retry

REPLY = {"data": {"answer": "A"}, "choices": [{"message": {"content": "first"}}, {"message": {"content": "last"}}],
         "citations": [{"chunk_id": "c1"}, {"chunk_id": "c2"}], "odd key": 1}


@pytest.mark.parametrize(("path", "value"), [
    ("data.answer", "A"), ("choices[0].message.content", "first"), ("choices[-1].message.content", "last"),
    ("citations[*].chunk_id", ["c1", "c2"]), ("odd key", 1), ("", REPLY),
])
def test_paths_find_their_value(path, value) -> None:
    assert parse_path(path).find(REPLY) == value


@pytest.mark.parametrize(("path", "where"), [
    ("data.missing", "data has no key 'missing'"), ("choices[5]", "choices has no item [5]"),
    ("data[*]", "data is not a list"), ("answer", "the reply has no key 'answer'"),
])
def test_a_path_with_nothing_says_where(path, where) -> None:
    with pytest.raises(PathNotFound) as exc:
        parse_path(path).find(REPLY)
    assert exc.value.where == where


@pytest.mark.parametrize("path", ["a..b", ".a", "a.", "a[x]", "a[1", "a]"])
def test_bad_paths_are_refused(path) -> None:
    with pytest.raises(PathSyntaxError, match="bad step"):
        parse_path(path, "--answer-path")


def test_the_template_is_filled_in_string_values_and_stays_json() -> None:
    question = 'say "hi"\\ then\n{case_id} {k} } {'
    template = parse_template('{"q": "Q: {question}", "meta": {"id": "{case_id}", "k": "{k}", "n": 3}, '
                              '"{question}": ["{k}x", "{other}"]}')
    filled = fill_template(template, question, "c-1", 5)
    assert json.loads(json.dumps(filled)) == {
        "q": f"Q: {question}", "meta": {"id": "c-1", "k": 5, "n": 3}, "{question}": ["5x", "{other}"]}
    default = fill_template(parse_template(DEFAULT_REQUEST_TEMPLATE), question, "c-1", 7)
    assert default == {"question": question, "case_id": "c-1", "k": 7}
    assert fill_url("http://h/ask?q={question}&id={case_id}", "a b&c", "x/y", 1) == "http://h/ask?q=a%20b%26c&id=x%2Fy"


def test_headers_read_env_values_and_scrub_them() -> None:
    headers = ResolvedHeaders(["Authorization: env:TOKEN", "X-Plain: visible"], {"TOKEN": "Bearer abc123"})
    assert headers.as_dict() == {"Authorization": "Bearer abc123", "X-Plain": "visible"}
    assert "abc123" not in repr(headers) and "abc123" not in str(headers)
    assert headers.scrub("got Bearer abc123 back") == "got [secret] back"
    with pytest.raises(EndpointConfigError, match="'MISSING' is not set"):
        ResolvedHeaders(["A: env:MISSING"], {})


def test_retry_after_seconds_and_dates_are_honoured_and_capped() -> None:
    now = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds(format_datetime(now + dt.timedelta(seconds=30), usegmt=True), now) == 30.0
    assert retry_after_seconds(format_datetime(now - dt.timedelta(seconds=30), usegmt=True), now) == 0.0
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None
    assert [wait_before_retry(n, 0.5, 60) for n in (1, 2, 3)] == [0.5, 1.0, 2.0]
    assert wait_before_retry(1, 0.5, 60, "3600") == 60  # capped
    assert wait_before_retry(1, 0.5, 60, "2") == 2.0
    assert retryable_status(429) and retryable_status(503) and not retryable_status(404)


@pytest.mark.parametrize("value", ["²", "٣", "nan", "inf", "-1", "1e309", "1.5", "Infinity", "0x10", "12 s"])
def test_a_retry_after_that_is_not_delay_seconds_or_a_date_uses_the_backoff(value) -> None:
    assert retry_after_seconds(value) is None
    assert wait_before_retry(2, 0.5, 60, value) == 1.0


def test_a_retry_after_of_thousands_of_digits_is_capped_without_converting_them() -> None:
    assert retry_after_seconds("9" * 5000) == 9_999_999_999.0
    assert wait_before_retry(1, 0.5, 60, "9" * 5000) == 60
    assert wait_before_retry(1, 0.5, 60, "9" * 11) == 60
    assert retry_after_seconds("0" * 30 + "3") == 3.0  # leading zeros are not digits of the delay


def _line(case_id: str, status: str = "ok") -> str:
    record = AnswerRecord(case_id=case_id, answer="a" if status == "ok" else "", status=status,
                          error=None if status == "ok" else "HTTP 503")
    return record.model_dump_json(exclude_none=True) + "\n"


def test_resume_drops_a_torn_last_line_and_the_error_lines(tmp_path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text(_line("a") + _line("b", "error") + _line("c") + '{"case_id": "d", "ans', encoding="utf-8")
    state = read_existing(path, {"a", "b", "c", "d"}, None)
    assert sorted(state.kept) == ["a", "c"] and state.dropped_errors == 1 and state.dropped_torn
    with AnswersWriter(path, state) as writer:
        writer.append(AnswerRecord(case_id="d", answer="new"))
    assert [json.loads(x)["case_id"] for x in path.read_text(encoding="utf-8").splitlines()] == ["a", "c", "d"]


def test_a_bad_line_inside_the_file_is_an_error_naming_it(tmp_path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text(_line("a") + '{"case_id": "b", "answer": 3}\n' + _line("c"), encoding="utf-8")
    with pytest.raises(AnswersFileError, match=r"a.jsonl:2: answer: Input should be a valid string"):
        read_existing(path, {"a", "b", "c"}, None)
    path.write_text(_line("a") + _line("a"), encoding="utf-8")
    with pytest.raises(AnswersFileError, match="a.jsonl:2: case_id 'a' appears twice"):
        read_existing(path, {"a"}, None)
    path.write_text(AnswerRecord(case_id="a", answer="x", answerer="other@1").model_dump_json() + "\n",
                    encoding="utf-8")
    with pytest.raises(AnswersFileError, match="answered by 'other@1', not 'mine@2'"):
        read_existing(path, {"a"}, "mine@2")
    with pytest.raises(AnswersFileError, match="answered by 'other@1', not an endpoint"):
        read_existing(path, {"a"}, None)


def test_a_dataset_name_is_the_file_of_the_datasets_folder_even_beside_a_folder_of_that_name(tmp_path, monkeypatch):
    from rag_pipeline.evaluation.datasets.resolve import dataset_file

    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "demo.json").write_text("[]", encoding="utf-8")
    (tmp_path / "demo").mkdir()  # the repo root has a demo/ folder: `--dataset demo` must not read it
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAG_DATASETS_DIR", str(tmp_path / "datasets"))
    assert dataset_file("demo") == tmp_path / "datasets" / "demo.json"
    assert dataset_file("other.json") == Path("other.json")
    assert dataset_file("missing") == Path("missing")  # then load_dataset names the file it could not read
