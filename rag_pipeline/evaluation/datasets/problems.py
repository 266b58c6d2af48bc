"""Every problem of a dataset file, worded for the file (case and field named, file order): pydantic's errors
translated, plus the rules no single value shows."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from rag_pipeline.contracts.dataset import (
    CASE_FIELDS,
    MAX_CASES,
    MAX_GRADE,
    MAX_JUDGMENTS,
    MAX_K,
    MAX_METADATA_BYTES,
    MAX_RELEVANT_IDS,
    MIN_GRADE,
    OBJECT_FIELDS,
    OPTIONAL_CASE_FIELDS,
    RELEVANT_GRADE,
    REQUIRED_CASE_FIELDS,
    UUID_PATTERN,
    DatasetCase,
    DatasetFile,
    normal_identifier,
)
from rag_pipeline.evaluation.datasets.judgments import judgment_problems
from rag_pipeline.evaluation.datasets.strict_json import DatasetProblem, got, json_problems, show, type_name

FIELD = "relevant_chunk_ids"
_UUID = re.compile(UUID_PATTERN)
_NOT_UUID = "is not a UUID (chunk ids are document_chunks.id, e.g. 30465673-88ea-41f0-a5a0-da496592f3df)"
_TOP_RANK = {"knowledge_base": 2, "name": 3, "description": 4, "metadata": 5, "answer_convention": 5,
             "annotators": 5, "cases": 6}
_BOUNDS = ("greater_than_equal", "less_than_equal")
_TWICE = "appears more than once in this object (JSON keeps only one of them)"
_EMPTY = ("is empty; every case needs at least one relevant chunk id (document_chunks.id), unless it is "
          "unanswerable (\"answerable\": false)")
_ALL_ZERO = (f"every grade is 0; a case needs at least one relevant chunk (grade >= {RELEVANT_GRADE}; 0 means "
             "judged not relevant), unless it is unanswerable (\"answerable\": false)")
_UNANSWERABLE = ("an unanswerable case (\"answerable\": false) has no relevant chunk: the knowledge base holds no "
                 "answer; give [] (or grade the judged chunks 0) or drop \"answerable\": false")
_STRINGS = {"reference_answers": "reference answers", "key_points": "key points"}
Keyed = tuple[tuple, DatasetProblem]


def _key_field(key: str) -> str:
    """``relevant_chunk_ids.<id>``, a very long key cut."""
    return f"{FIELD}.{key if len(key) <= 60 else key[:60] + '…'}"


def _text(error: ErrorDetails, got_value: str) -> str:
    return f"must be a string, {got_value}" if error["type"] == "string_type" else str(error["ctx"]["error"])


def _relevant(loc: tuple, error: ErrorDetails, keys: dict[str, tuple[int, str]]) -> tuple[tuple, str, str]:
    """``(order, field, message)`` of an error inside ``relevant_chunk_ids`` (``loc`` after the field; ``keys``
    maps a graded key as pydantic names it to its position and the key as written)."""
    kind, value = error["type"], error["input"]
    if len(loc) == 0:
        return (0,), FIELD, f"must be an array of chunk ids or an object {{chunk_id: grade}}, {got(value)}"
    if len(loc) == 1:
        return (0,), FIELD, f"has {error['ctx']['actual_length']} ids; the limit is {MAX_RELEVANT_IDS}"
    if loc[0] == "list":
        where = f"{FIELD}[{loc[1]}]"
        if kind == "string_type":
            return (1, loc[1], 0), where, f"must be a string chunk id, {got(value)}"
        return (1, loc[1], 0), where, f"{show(value)} {_NOT_UUID}"
    pos, key = keys[loc[1]]
    if len(loc) == 3:  # the key itself
        return (1, pos, 0), _key_field(key), f"{show(key)} {_NOT_UUID}"
    if kind in _BOUNDS:
        problem = (f"grade must be between {MIN_GRADE} and {MAX_GRADE} ({MIN_GRADE} = judged not relevant), "
                   f"got {value}")
    else:
        problem = f"must be an integer grade between {MIN_GRADE} and {MAX_GRADE}, {got(value)}"
    return (1, pos, 1), _key_field(key), problem


def _case_error(items: list, loc: tuple, error: ErrorDetails) -> Keyed:
    index, kind, value = loc[0], error["type"], error["input"]
    item = items[index]
    case_id = _case_id(item)

    def keyed(order: tuple, field: str | None, message: str) -> Keyed:
        return (index, *order), DatasetProblem(message, field=field, case_index=index, case_id=case_id)

    if len(loc) == 1:
        return keyed((0,), None, f"each case must be an object, got {type_name(value)}")
    field = loc[1]
    if kind == "missing":
        return keyed((2, CASE_FIELDS.index(field)), field, "is missing")
    if kind == "extra_forbidden" and len(loc) == 2:
        return keyed((1, field), field, f"unknown field; a case has {list(REQUIRED_CASE_FIELDS)} and optionally "
                                        f"{list(OPTIONAL_CASE_FIELDS)}")
    if field == FIELD:
        keys = {} if len(loc) < 4 or loc[2] != "object" else {  # a lone surrogate reaches the loc as U+FFFD
            key.encode("utf-8", "surrogatepass").decode("utf-8", "replace"): (pos, key)
            for pos, key in reversed(list(enumerate(item[FIELD])))}
        order, where, message = _relevant(loc[2:], error, keys)
        return keyed((5, order), where, message)
    if field == "k":
        message = (f"must be between 1 and {MAX_K}, got {value}" if kind in _BOUNDS
                   else f"must be an integer between 1 and {MAX_K}, {got(value)}")
        return keyed((6,), field, message)
    if field == "answerable":
        return keyed((8,), field, f"must be true or false, {got(value)}")
    if field in _STRINGS:
        return keyed(*_strings(field, loc[2:], error))
    if field == "judgments":
        return keyed(*_judgment(loc[2:], error))
    return keyed((3 if field == "case_id" else 4,), field, _text(error, got(value)))


def _strings(field: str, loc: tuple, error: ErrorDetails) -> tuple[tuple, str, str]:
    """``(order, field, message)`` of an error in ``reference_answers`` or ``key_points`` (``loc`` after it)."""
    order, kind, what = (7 if field == "reference_answers" else 9,), error["type"], _STRINGS[field]
    if loc:
        return (*order, loc[0]), f"{field}[{loc[0]}]", _text(error, got(error["input"]))
    if kind == "too_short":
        return order, field, f"is empty; give at least one of the {what} or leave the field out"
    if kind == "too_long":
        return order, field, f"has {error['ctx']['actual_length']} {what}; the limit is {error['ctx']['max_length']}"
    return order, field, f"must be an array of strings, {got(error['input'])}"


def _judgment(loc: tuple, error: ErrorDetails) -> tuple[tuple, str, str]:
    """``(order, field, message)`` of an error in ``judgments`` (``loc`` after it)."""
    kind, value = error["type"], error["input"]
    if not loc:
        message = (f"has {error['ctx']['actual_length']} judgments; the limit is {error['ctx']['max_length']}"
                   if kind == "too_long" else "is empty; give at least one judgment or leave the field out"
                   if kind == "too_short" else f"must be an array of judgments, {got(value)}")
        return (10,), "judgments", message
    if len(loc) == 1:
        return (10, loc[0]), f"judgments[{loc[0]}]", ("must be an object {\"annotator\", \"chunk_id\", "
                                                      f"\"grade\"}}, {got(value)}")
    sub, where = loc[1], f"judgments[{loc[0]}].{loc[1]}"
    if kind == "missing":
        message = "is missing"
    elif kind == "extra_forbidden":
        message = "unknown field; a judgment has annotator, chunk_id, grade and optionally adjudicated"
    elif sub == "grade":
        message = (f"grade must be between {MIN_GRADE} and {MAX_GRADE}, got {value}" if kind in _BOUNDS
                   else f"must be an integer grade between {MIN_GRADE} and {MAX_GRADE}, {got(value)}")
    elif sub == "chunk_id":
        message = f"must be a string chunk id, {got(value)}" if kind == "string_type" else f"{show(value)} {_NOT_UUID}"
    elif sub == "adjudicated":
        message = f"must be true or false, {got(value)}"
    else:
        message = _text(error, got(value))
    return (10, loc[0], 0, str(sub)), where, message


def _no_relevant(item: dict) -> tuple[tuple, str] | None:
    """``(order, message)`` when an answerable case (``answerable`` anything but ``false``) has no relevant chunk
    (an empty list or object, or valid grades all 0), or an unanswerable one has one (docs/design.md §12.1)."""
    value = item.get(FIELD)
    if not isinstance(value, (list, dict)):
        return None
    if item.get("answerable") is False:
        relevant = value if isinstance(value, list) else [
            g for g in value.values() if type(g) is int and g >= RELEVANT_GRADE]
        return ((3,), _UNANSWERABLE) if relevant else None
    if not value:
        return (0,), _EMPTY
    grades = list(value.values()) if isinstance(value, dict) else []
    if grades and all(type(g) is int and MIN_GRADE <= g < RELEVANT_GRADE for g in grades):
        return (2,), _ALL_ZERO
    return None


def _set_problems(index: int, item: Any, flagged: set[str], first_case: dict[str, tuple[int, str]],
                  annotators: list[str] | None = None) -> list[Keyed]:
    """The rules across values of case ``index``: duplicate JSON keys and ids in it, a ``case_id`` used before
    (``first_case`` remembers each one's first case), the judgments' rules (:mod:`.judgments`)."""
    if not isinstance(item, dict):
        return []
    found: list[tuple[tuple, str, str]] = [((0, key), key, "appears more than once in this case")
                                           for key in getattr(item, "duplicate_keys", ())]
    case_id = item.get("case_id")
    if isinstance(case_id, str) and "case_id" not in flagged:
        first, written = first_case.setdefault(normal_identifier(case_id), (index, case_id))
        if first != index:
            same = "" if written == case_id else f" ({show(written)} once NFC-normalised and stripped)"
            found.append(((3,), "case_id", f"duplicate case_id; first used by cases[{first}]{same}"))
    if (missing := _no_relevant(item)) is not None:
        found.append(((5, missing[0]), FIELD, missing[1]))
    value = item.get(FIELD)
    if isinstance(value, (list, dict)) and 1 <= len(value) <= MAX_RELEVANT_IDS:
        found += [((5, (0,)), _key_field(key), _TWICE) for key in getattr(value, "duplicate_keys", ())]
        seen: dict[str, Any] = {}
        for pos, chunk_id in enumerate(value if len(value) > 1 else ()):
            if not isinstance(chunk_id, str) or not _UUID.fullmatch(chunk_id):
                continue
            normal = chunk_id.strip().lower()
            where = f"{FIELD}[{pos}]" if isinstance(value, list) else _key_field(chunk_id)
            if normal not in seen:
                seen[normal] = where
            else:
                found.append(((5, (1, pos, 0)), where, f"duplicate id {chunk_id!r} (same as {seen[normal]})"))
    if isinstance(item.get("judgments"), list) and len(item["judgments"]) <= MAX_JUDGMENTS:
        relevant_ok = not flagged & {FIELD, "judgments"} and not any(f == FIELD for _, f, _ in found)
        found += [((5, (3,)) if order == (-1,) else (10, order[0], 1, order[1]), field, message)
                  for order, field, message in judgment_problems(item, annotators, relevant_ok)]
    return [((index, *order), DatasetProblem(message, field=field, case_index=index, case_id=_case_id(item)))
            for order, field, message in found]


def _case_id(item: Any) -> str | None:
    """The ``case_id`` a problem of this case names: the field if it is a string."""
    case_id = item.get("case_id") if isinstance(item, dict) else None
    return case_id if isinstance(case_id, str) else None


def _metadata(value: Any) -> list[DatasetProblem]:
    """Strict JSON (no NaN, no duplicate keys) of at most :data:`MAX_METADATA_BYTES`."""
    found = [DatasetProblem(message, field=where) for where, message in json_problems(value, "metadata", text=True)]
    if found:
        return found
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))
    if size > MAX_METADATA_BYTES:
        return [DatasetProblem(f"is {size:,} bytes of JSON; the limit is {MAX_METADATA_BYTES:,} (1 MB)",
                               field="metadata")]
    return []


@dataclass(frozen=True)
class FileCheck:
    """What :func:`file_problems` found: the valid cases and description (used only when ``keyed`` is empty),
    the first problems in file order (at most ``limit``) with their sort keys, and how many more there were."""

    cases: list[DatasetCase]
    description: str | None
    keyed: list[Keyed]
    more: int


def _header_problems(data: dict) -> list[Keyed]:
    """The problems of the top level: unknown and repeated keys, each top-level value, the cases array itself."""
    try:
        DatasetFile.model_validate({k: v for k, v in data.items() if k != "cases"})
        errors = []
    except ValidationError as exc:
        errors = [e for e in exc.errors(include_url=False) if e["loc"][0] != "cases"]
    keyed: list[Keyed] = []
    unknown = sorted(str(e["loc"][0]) for e in errors if len(e["loc"]) == 1 and e["type"] == "extra_forbidden")
    if unknown:
        keyed.append(((-1, 0), DatasetProblem(f"unknown top-level key(s) {unknown}; allowed: {list(OBJECT_FIELDS)}")))
    keyed += [((-1, 1, key), DatasetProblem(f"top-level key {key!r} appears more than once"))
              for key in getattr(data, "duplicate_keys", ())]
    for error in errors:
        if error["type"] != "extra_forbidden":
            field, value = str(error["loc"][0]), error["input"]
            message = (f"must be an object, {got(value)}" if field == "metadata"
                       else f"must be squad, cmrc or auto (or absent), {got(value)}" if field == "answer_convention"
                       else _text(error, f"got {type_name(value)}"))
            keyed.append(((-1, _TOP_RANK[field]), DatasetProblem(message, field=field)))
    cases = data.get("cases")
    if "cases" not in data:
        keyed.append(((-1, 6), DatasetProblem("the top-level object has no 'cases' array", field="cases")))
    elif not isinstance(cases, list):
        keyed.append(((-1, 6), DatasetProblem(f"must be an array of cases, got {type_name(cases)}", field="cases")))
    elif not cases:
        keyed.append(((-1, 9), DatasetProblem("there are no cases", field="cases")))
    elif len(cases) > MAX_CASES:
        keyed.append(((-1, 9), DatasetProblem(f"{len(cases)} cases; the limit is {MAX_CASES}", field="cases")))
    names = data.get("annotators")
    if isinstance(names, list):
        repeated = sorted({a for a in names if isinstance(a, str) and names.count(a) > 1})
        keyed += [((-1, 5, 1), DatasetProblem(f"{a!r} is listed more than once", field="annotators"))
                  for a in repeated]
    if isinstance(data.get("metadata"), dict):
        keyed += [((-1, 5, i), problem) for i, problem in enumerate(_metadata(data["metadata"]))]
    return keyed


def _case_problems(items: list, index: int, first_case: dict[str, tuple[int, str]],
                   annotators: list[str] | None = None) -> tuple[DatasetCase | None, list[Keyed]]:
    """Case ``index`` validated, or its problems in file order."""
    item = items[index]
    try:
        return_case, errors = DatasetCase.model_validate(item), []
    except ValidationError as exc:
        return_case, errors = None, exc.errors(include_url=False)
    keyed = [_case_error(items, (index, *e["loc"]), e) for e in errors]
    keyed += _set_problems(index, item, {str(e["loc"][0]) for e in errors if e["loc"]}, first_case, annotators)
    if any(key[1:2] == (5,) and key[2:] != ((2,),) for key, _ in keyed):  # "every grade is 0": alone
        keyed = [(key, p) for key, p in keyed if key[1:] != (5, (2,))]
    return (return_case if not keyed else None), sorted(keyed, key=lambda kp: kp[0])


def file_problems(data: dict, limit: int) -> FileCheck:
    """Validate a dataset object case by case: the first ``limit`` problems with their place in the file order
    (``(-1, rank, ...)`` for the top level, rank 7 left to the caller's own checks; ``(case index, ...)``), and
    how many more. Only the kept problems are held, whatever the number of bad cases."""
    keyed = _header_problems(data)
    items = data["cases"] if isinstance(data.get("cases"), list) and len(data["cases"]) <= MAX_CASES else []
    cases: list[DatasetCase] = []
    first_case: dict[str, tuple[int, str]] = {}
    more = 0
    annotators = data.get("annotators")
    annotators = annotators if isinstance(annotators, list) and all(isinstance(a, str) for a in annotators) else None
    for index in range(len(items)):
        case, found = _case_problems(items, index, first_case, annotators)
        if case is not None and not keyed:
            cases.append(case)
        room = max(0, limit - len(keyed))
        keyed += found[:room]
        more += len(found) - len(found[:room])
    description = data.get("description") if isinstance(data.get("description"), str) else None
    return FileCheck(cases=cases, description=description, keyed=sorted(keyed, key=lambda kp: kp[0]), more=more)
