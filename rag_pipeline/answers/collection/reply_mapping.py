"""An endpoint's reply → one answer line (docs/design.md §12.2; the paths: :mod:`.response_paths`); a reply of
another shape is the case's ``error`` line, and every line leaves through :func:`scrubbed_record`."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

from pydantic import ValidationError

from rag_pipeline.contracts.answers import MAX_ANSWER_CHARS, MAX_RAW_RESPONSE_CHARS, AnswerRecord
from rag_pipeline.storage.http.response_paths import PathNotFound, ResponsePath

ERROR_BODY_CHARS = 300
"""How much of a reply an error message quotes."""
MAX_INT_DIGITS = 4000
"""A JSON integer of more characters than this is not converted (Python refuses more than 4300 digits)."""


class LongInteger:
    """A JSON integer too long to convert, kept as its text: a wrong type only at the answer or id path."""

    def __init__(self, text: str):
        self.text = text


def _int(text: str) -> int | LongInteger:
    return int(text) if len(text) <= MAX_INT_DIGITS else LongInteger(text)


def _kind(value: Any) -> str:
    if isinstance(value, LongInteger):
        return f"an integer of {len(value.text.lstrip('-')):,} digits"
    return type(value).__name__


class CallFacts(TypedDict, total=False):
    """What an answer line records of the requests that produced it."""

    latency_ms: float | None
    attempts: int | None
    answerer: str | None


@dataclass(frozen=True)
class ReplyPaths:
    answer: ResponsePath
    citations: ResponsePath
    contexts: ResponsePath


def raw_text(body: bytes, scrub: Callable[[str], str]) -> str:
    """The stored form of a reply: decoded (bad bytes replaced), secrets scrubbed, then cut at the cap (the bytes
    read run past it, so a secret straddling the cap is scrubbed whole before the cut)."""
    text = body[:MAX_RAW_RESPONSE_CHARS * 4 + 65_536].decode("utf-8", errors="replace")
    return scrub(text)[:MAX_RAW_RESPONSE_CHARS]


def scrubbed_record(record: AnswerRecord, scrub: Callable[[str], str]) -> AnswerRecord:
    """``record`` with ``scrub`` applied to each of its strings, each cut to its field's limit again."""
    def ids(values: list[str] | None) -> list[str] | None:
        return None if values is None else [scrub(v) for v in values]

    def text(value: str | None, limit: int) -> str | None:
        return None if value is None else scrub(value)[:limit]

    return record.model_copy(update={
        "answer": text(record.answer, MAX_ANSWER_CHARS),
        "error": text(record.error, 10_000), "raw_response": text(record.raw_response, MAX_RAW_RESPONSE_CHARS),
        "cited_chunk_ids": ids(record.cited_chunk_ids), "retrieved_chunk_ids": ids(record.retrieved_chunk_ids),
        "answerer": text(record.answerer, 200)})


def error_record(case_id: str, error: str, *, raw: str | None = None, **facts: Unpack[CallFacts]) -> AnswerRecord:
    return AnswerRecord(case_id=case_id, status="error", error=error[:10_000], raw_response=raw, **facts)


def _ids(value: Any, what: str, path: ResponsePath) -> list[str]:
    if not isinstance(value, list):
        raise ValueError(f"{what} at {path.text!r} is {_kind(value)}, expected a list of chunk ids")
    bad = next((i for i, item in enumerate(value) if not isinstance(item, str)), None)
    if bad is not None:
        raise ValueError(f"{what} at {path.text!r}: item [{bad}] is {_kind(value[bad])}, expected a "
                         "string chunk id")
    return value


def _optional(document: Any, path: ResponsePath, what: str) -> list[str] | None:
    try:
        value = path.find(document)
    except PathNotFound:
        return None
    return None if value is None else _ids(value, what, path)


def record_from_reply(case_id: str, body: bytes, paths: ReplyPaths, scrub: Callable[[str], str],
                      **common: Unpack[CallFacts]) -> AnswerRecord:
    """The answer line of a 2xx reply ``body`` (complete: the caller refuses an over-long body first)."""
    raw = raw_text(body, scrub)
    try:
        document = json.loads(body, parse_int=_int)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        return error_record(case_id, f"the reply is not JSON{where}: {raw[:ERROR_BODY_CHARS]!r}", raw=raw,
                            **common)
    except RecursionError:
        return error_record(case_id, "the reply is JSON nested too deeply to read", raw=raw, **common)
    except ValueError:  # what json cannot convert; its message names Python's settings, so it is not shown
        return error_record(case_id, "the reply is JSON this collector cannot read", raw=raw, **common)
    try:
        answer = paths.answer.find(document)
    except PathNotFound as exc:
        return error_record(case_id, f"no answer at --answer-path {paths.answer.text!r}: {exc.where}", raw=raw,
                            **common)
    try:
        if not isinstance(answer, str):
            raise ValueError(f"the answer at {paths.answer.text!r} is {_kind(answer)}, expected a string")
        cited = _optional(document, paths.citations, "citations")
        contexts = _optional(document, paths.contexts, "contexts")
        return AnswerRecord(case_id=case_id, answer=answer, cited_chunk_ids=cited, retrieved_chunk_ids=contexts,
                            raw_response=raw, **common)
    except ValueError as exc:  # ValidationError is one: an answer or id list over the answers file's limits
        message = (f"the reply does not fit an answer line: {_first_error(exc)}" if isinstance(exc, ValidationError)
                   else str(exc))
        return error_record(case_id, message, raw=raw, **common)


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    return f"{'.'.join(map(str, first['loc']))}: {first['msg']}"
