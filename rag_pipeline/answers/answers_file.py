"""Reading an answers file (JSON Lines, one :class:`~rag_pipeline.contracts.answers.AnswerRecord` a line) as
strictly as a dataset is read (docs/design.md §12.2): :class:`AnswersFileError` lists every problem."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from rag_pipeline.contracts.answers import AnswerRecord
from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.evaluation.datasets.strict_json import (
    MAX_LISTED_PROBLEMS,
    NonFinite,
    field_path,
    got,
    json_problems,
    object_hook,
    parse_float,
    show,
    type_name,
)
from rag_pipeline.storage.files import FileReadError, format_size, read_bounded
from rag_pipeline.storage.names import printable

MAX_FILE_BYTES = 512 * 1024 * 1024
"""An answers file is at most this large (10,000 lines with a full ``raw_response`` each fit)."""
MAX_COLLECTED = 1000
"""Problems collected before the reader stops checking (a file of millions of bad lines stays cheap to refuse)."""
_BOM = b"\xef\xbb\xbf"
_CASE_ID = re.compile(r'"case_id"\s*:\s*"((?:[^"\\]|\\.){1,512})"')
"""A ``case_id`` string in a line that is not valid JSON (the line's problem still names its case)."""


@dataclass(frozen=True)
class AnswersProblem:
    """One problem of an answers file; ``line`` is 1-based, ``None`` for the file as a whole."""

    message: str
    line: int | None = None
    field: str | None = None
    case_id: str | None = None

    def describe(self, source: str) -> str:
        line = f"line {self.line}" + (f" (case_id {printable(self.case_id)!r})" if self.case_id else "")
        where = [source] + ([line] if self.line else []) + ([f"field {self.field!r}"] if self.field else [])
        return ": ".join(where) + ": " + self.message


class AnswersFileError(BadInputError, ValueError):
    """An answers file that cannot be used; ``str()`` lists every problem, one per line (CLI exit 2, HTTP 422)."""

    def __init__(self, source: str, problems: list[AnswersProblem]):
        self.source, self.problems = source, problems
        lines = [p.describe(source) for p in problems[:MAX_LISTED_PROBLEMS]]
        if len(problems) > MAX_LISTED_PROBLEMS:
            lines.append(f"… and {len(problems) - MAX_LISTED_PROBLEMS} more problems")
        if len(problems) == 1:
            super().__init__(f"invalid answers file {lines[0]}")
        else:
            super().__init__("\n".join([f"invalid answers file {source}: {len(problems)} problems",
                                        *("  " + line for line in lines)]))


@dataclass(frozen=True)
class AnswersFile:
    """A valid answers file: its records by case id (file order), the answerer its lines name (``None``: none
    does), the SHA-256 of its bytes, and the dataset's case ids it has no line for (dataset order)."""

    records: dict[str, AnswerRecord]
    answerer: str | None
    sha256: str
    missing: list[str] = field(default_factory=list)


def read_answers(answers: str | Path | bytes, *, case_ids: Sequence[str], filename: str | None = None
                 ) -> AnswersFile:
    """Read and validate an answers file (a path or upload bytes) against ``case_ids``; every problem listed."""
    if isinstance(answers, bytes):
        return parse_answers(answers, case_ids=case_ids, source=printable(filename or "<answers>"))
    source = printable(Path(answers))
    try:
        raw = read_bounded(answers, MAX_FILE_BYTES, what="the answers file")
    except FileReadError as exc:
        raise AnswersFileError(source, [AnswersProblem(exc.reason)]) from None
    return parse_answers(raw, case_ids=case_ids, source=source)


def parse_answers(raw: bytes, *, case_ids: Sequence[str], source: str = "<answers>") -> AnswersFile:
    """Validate answers-file bytes (see the module doc)."""
    text = _decode(raw, source)
    known = set(case_ids)
    problems: list[AnswersProblem] = []
    records: dict[str, AnswerRecord] = {}
    first_line: dict[str, int] = {}
    answerer: tuple[str, int] | None = None
    for number, line in enumerate(text.split("\n"), start=1):
        if len(problems) >= MAX_COLLECTED:
            problems.append(AnswersProblem(f"checking stopped after {MAX_COLLECTED} problems; the lines from here "
                                           "on were not checked", number))
            break
        if not line.strip():
            continue
        found: list[AnswersProblem] = []
        data, record = _record(line, number, found)
        case_id, named = data.get("case_id") if data else _case_id_of(line), data.get("answerer")
        if isinstance(case_id, str) and case_id:
            if not data:  # read from a line that is not JSON: only named in its problem
                pass
            elif case_id not in known:
                found.append(AnswersProblem(f"{show(case_id)} is not a case of the dataset ({len(known)} cases)",
                                            number, "case_id"))
            elif case_id in first_line:
                found.append(AnswersProblem(f"{show(case_id)} already answered on line {first_line[case_id]} "
                                            "(one line per case)", number, "case_id"))
            else:
                first_line[case_id] = number
                if record is not None:
                    records[case_id] = record
        if isinstance(named, str):
            if answerer is None:
                answerer = (named, number)
            elif named != answerer[0]:
                found.append(AnswersProblem(f"{show(named)} differs from {show(answerer[0])} on line "
                                            f"{answerer[1]} (every line names the same answerer)",
                                            number, "answerer"))
        named_case = case_id if isinstance(case_id, str) and case_id else None
        problems.extend(replace(p, case_id=named_case) for p in found)
    if not problems and not first_line:
        problems.append(AnswersProblem("has no answer lines; expected one JSON object per line"))
    if problems:
        raise AnswersFileError(source, problems)
    return AnswersFile(records=records, answerer=answerer[0] if answerer else None,
                       sha256=hashlib.sha256(raw).hexdigest(), missing=[c for c in case_ids if c not in records])


def _decode(raw: bytes, source: str) -> str:
    if len(raw) > MAX_FILE_BYTES:
        raise AnswersFileError(source, [AnswersProblem(
            f"the answers file is larger than {format_size(MAX_FILE_BYTES)}")])
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise AnswersFileError(source, [AnswersProblem("file is UTF-16 encoded; save it as UTF-8")])
    body = raw[len(_BOM):] if raw.startswith(_BOM) else raw
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = body.count(b"\n", 0, exc.start) + 1
        start = body.rfind(b"\n", 0, exc.start) + 1
        end = body.find(b"\n", exc.start)
        text = body[start:end if end >= 0 else len(body)].decode("utf-8", "replace")
        raise AnswersFileError(source, [AnswersProblem(
            f"not valid UTF-8: byte 0x{body[exc.start]:02x}; save the file as UTF-8", line,
            case_id=_case_id_of(text))]) from None


def _record(line: str, number: int, problems: list[AnswersProblem]) -> tuple[dict, AnswerRecord | None]:
    """The line's JSON object (``{}`` if it is none) and its record, or ``None`` with its problems added."""
    try:
        data = json.loads(line, object_pairs_hook=object_hook, parse_float=parse_float, parse_constant=NonFinite)
    except json.JSONDecodeError as exc:
        problems.append(AnswersProblem(f"invalid JSON at column {exc.colno}: {exc.msg}", number))
        return {}, None
    except RecursionError:
        problems.append(AnswersProblem("invalid JSON: nested too deeply", number))
        return {}, None
    except ValueError as exc:  # an integer of more than 4300 digits (Python's int-from-string limit)
        problems.append(AnswersProblem("invalid JSON: a number has more than 4300 digits" if "digits" in str(exc)
                                       else "invalid JSON: a value cannot be read", number))
        return {}, None
    if not isinstance(data, dict):
        problems.append(AnswersProblem(f"must be a JSON object (one answer per line), got {type_name(data)}", number))
        return {}, None
    found = [AnswersProblem(message, number, where.removeprefix("$.") or None)
             for where, message in json_problems(data, "$")]
    found += [AnswersProblem(message, number, where) for where, message in _unstorable(data)]
    problems.extend(found)
    try:
        record = AnswerRecord.model_validate(data)
    except ValidationError as exc:
        flagged = {p.field for p in found}  # a non-finite number is reported once, as such
        problems.extend(p for p in (AnswersProblem(_message(e), number, field_path(e["loc"]) or None)
                                    for e in exc.errors()) if p.field not in flagged)
        return data, None
    return data, None if found else record


def _case_id_of(line: str) -> str | None:
    """The ``case_id`` written in a line that is not valid JSON, if one can be seen in it."""
    match = _CASE_ID.search(line)
    if match is None:
        return None
    try:
        value = json.loads(f'"{match.group(1)}"')
    except ValueError:
        return None
    return value if isinstance(value, str) and value.strip() else None


def _unstorable(data: dict) -> list[tuple[str, str]]:
    """``(field, message)`` of the stored strings PostgreSQL cannot store (a NUL, a lone surrogate)."""
    out = []
    for key, value in data.items():
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            if key == "raw_response" or not isinstance(item, str):
                continue
            where = f"{key}[{i}]" if isinstance(value, list) else key
            if "\x00" in item:
                out.append((where, "contains a NUL character (\\u0000), which PostgreSQL cannot store"))
            else:
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    out.append((where, "contains an unpaired UTF-16 surrogate (invalid Unicode)"))
    return out


def _message(error: ErrorDetails) -> str:
    kind, value = error["type"], error.get("input")
    if kind == "extra_forbidden":
        return "is not a field of an answer line (schemas/answers-v1.json lists them)"
    if kind == "missing":
        return "is required"
    return f"{error['msg'][0].lower()}{error['msg'][1:]}, {got(value)}"


def line_problems(line: str) -> list[AnswersProblem]:
    """What this reader refuses in one line on its own (the collector checks each line it writes)."""
    problems: list[AnswersProblem] = []
    _record(line, 1, problems)
    return problems
