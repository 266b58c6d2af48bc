"""Checks of a dataset file's fields (:mod:`rag_pipeline.evaluation.dataset`): a case's ``case_id``,
``question``, ``k`` and ``relevant_chunk_ids``, and the top-level ``metadata``.

Each ``check_*`` returns the valid value or ``None``, reporting every problem through the ``bad(field,
message)`` callback of the case being validated.

``relevant_chunk_ids`` has two forms (seed §2 plus graded judgments)::

    "relevant_chunk_ids": ["30465673-88ea-41f0-a5a0-da496592f3df", ...]           # every id grade 1
    "relevant_chunk_ids": {"30465673-88ea-41f0-a5a0-da496592f3df": 2, "…": 0}      # graded, 0..10

A grade is an integer from 0 to 10 (JSON ``true``, ``2.0`` or ``"2"`` are not); 0 means *judged not
relevant*: the id is kept with the case (stored dataset, reports) but counts as relevant nowhere. A case
needs at least one id with grade >= 1. Ids are UUIDs (``document_chunks.id``), normalised to lower case;
the same id twice (also in another spelling) is an error.

A problem of one id or grade names the field ``relevant_chunk_ids[i]`` in the list form and
``relevant_chunk_ids.<id>`` in the graded form. ``metadata`` is a free-form JSON object of at most 1 MB
(strict JSON: no NaN, no duplicate keys).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from rag_pipeline.evaluation.dataset_json import DatasetProblem, got, json_problems, show, text_problem

FIELD = "relevant_chunk_ids"
MAX_RELEVANT_IDS = 1000
MAX_K = 1000
MAX_QUESTION_CHARS = 10_000
MAX_CASE_ID_CHARS = 200
MAX_METADATA_BYTES = 1024 * 1024
MIN_GRADE, MAX_GRADE = 0, 10
RELEVANT_GRADE = 1
"""The lowest grade that counts as relevant (precision, recall, MRR, AP, ``is_relevant``, miss diagnosis)."""

UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_NOT_UUID = "is not a UUID (chunk ids are document_chunks.id, e.g. 30465673-88ea-41f0-a5a0-da496592f3df)"

Bad = Callable[[str | None, str], None]
Judgments = tuple[tuple[str, int], ...]


def _key_field(key: str) -> str:
    """``relevant_chunk_ids.<id>``, a very long key cut."""
    return f"{FIELD}.{key if len(key) <= 60 else key[:60] + '…'}"


def check_relevant(item: dict, bad: Bad) -> tuple[tuple[str, ...], Judgments | None] | None:
    """``(relevant ids, judgments)`` of a valid field: the ids with grade >= 1, and for the graded form every
    ``(id, grade)`` (grade-0 ids included; ``None`` for the list form). A list keeps its order; a graded
    object's ids are sorted (its key order carries no meaning, and jsonb does not keep it).
    ``None`` when the field is missing or has a problem (reported through ``bad``)."""
    if FIELD not in item:
        return None
    value = item[FIELD]
    if isinstance(value, list):
        ids = _check_list(value, bad)
        return None if ids is None else (ids, None)
    if isinstance(value, dict):
        return _check_graded(value, bad)
    bad(FIELD, f"must be an array of chunk ids or an object {{chunk_id: grade}}, {got(value)}")
    return None


def _check_size(value, bad: Bad) -> bool:
    if not value:
        bad(FIELD, "is empty; every case needs at least one relevant chunk id (document_chunks.id)")
        return False
    if len(value) > MAX_RELEVANT_IDS:
        bad(FIELD, f"has {len(value)} ids; the limit is {MAX_RELEVANT_IDS}")
        return False
    return True


def _check_list(value: list, bad: Bad) -> tuple[str, ...] | None:
    if not _check_size(value, bad):
        return None
    ids: dict[str, int] = {}
    ok = True
    for pos, chunk_id in enumerate(value):
        if not isinstance(chunk_id, str):
            bad(f"{FIELD}[{pos}]", f"must be a string chunk id, {got(chunk_id)}")
            ok = False
        elif not UUID_RE.fullmatch(chunk_id.strip()):
            bad(f"{FIELD}[{pos}]", f"{show(chunk_id)} {_NOT_UUID}")
            ok = False
        else:
            normal = chunk_id.strip().lower()
            if normal in ids:
                bad(f"{FIELD}[{pos}]", f"duplicate id {chunk_id!r} (same as {FIELD}[{ids[normal]}])")
                ok = False
            else:
                ids[normal] = pos
    return tuple(ids) if ok else None


def grade_problem(grade: Any) -> str | None:
    """Why ``grade`` is not a valid grade (``None`` if it is one)."""
    if isinstance(grade, bool) or not isinstance(grade, int):
        return f"must be an integer grade between {MIN_GRADE} and {MAX_GRADE}, {got(grade)}"
    if not MIN_GRADE <= grade <= MAX_GRADE:
        return (f"grade must be between {MIN_GRADE} and {MAX_GRADE} ({MIN_GRADE} = judged not relevant), "
                f"got {grade}")
    return None


def _check_graded(value: dict, bad: Bad) -> tuple[tuple[str, ...], Judgments] | None:
    if not _check_size(value, bad):
        return None
    ok = True
    for key in getattr(value, "duplicate_keys", ()):
        bad(_key_field(key), "appears more than once in this object (JSON keeps only one of them)")
        ok = False
    first: dict[str, str] = {}
    judgments: list[tuple[str, int]] = []
    for key, grade in value.items():
        if not UUID_RE.fullmatch(key.strip()):
            bad(_key_field(key), f"{show(key)} {_NOT_UUID}")
            ok = False
        else:
            normal = key.strip().lower()
            if normal in first:
                bad(_key_field(key), f"duplicate id {key!r} (same as {_key_field(first[normal])})")
                ok = False
            else:
                first[normal] = key
                judgments.append((normal, grade))
        if problem := grade_problem(grade):
            bad(_key_field(key), problem)
            ok = False
    if not ok:
        return None
    judgments.sort()  # an object's key order means nothing (JSON, jsonb): id order is the canonical one
    relevant = tuple(cid for cid, grade in judgments if grade >= RELEVANT_GRADE)
    if not relevant:
        bad(FIELD, f"every grade is 0; a case needs at least one relevant chunk (grade >= {RELEVANT_GRADE}; "
                   "0 means judged not relevant)")
        return None
    return relevant, tuple(judgments)


def relevance_of(value: Any) -> dict[str, int]:
    """``{id: grade}`` of the ids with grade >= 1 of a raw (already validated) ``relevant_chunk_ids``
    value, list or object, e.g. a case read back from ``retrieval_evaluation_datasets.cases``."""
    if isinstance(value, Mapping):
        return {str(k): int(g) for k, g in value.items() if int(g) >= RELEVANT_GRADE}
    return dict.fromkeys((str(i) for i in value), RELEVANT_GRADE)


def relevant_ids_of(value: Any) -> list[str]:
    """The ids that count as relevant of a raw ``relevant_chunk_ids`` value: every entry of a list (as
    given, duplicates and malformed ids included), the keys of grade >= 1 of an object."""
    if isinstance(value, Mapping):
        return [str(k) for k, g in value.items()
                if isinstance(g, int) and not isinstance(g, bool) and g >= RELEVANT_GRADE]
    return [str(i) for i in value]


def _check_text(item: dict, bad: Bad, field: str, limit: int, empty: str) -> str | None:
    """A non-empty string field of at most ``limit`` characters without NUL or lone surrogates."""
    if field not in item:
        return None
    value = item[field]
    if not isinstance(value, str):
        bad(field, f"must be a string, {got(value)}")
    elif not value.strip():
        bad(field, empty)
    elif len(value) > limit:
        bad(field, f"is {len(value):,} characters; the limit is {limit:,}")
    elif problem := text_problem(value):
        bad(field, problem)
    else:
        return value
    return None


def check_case_id(item: dict, bad: Bad) -> str | None:
    return _check_text(item, bad, "case_id", MAX_CASE_ID_CHARS, "must not be empty")


def check_question(item: dict, bad: Bad) -> str | None:
    return _check_text(item, bad, "question", MAX_QUESTION_CHARS, "must not be empty or whitespace only")


def check_k(item: dict, bad: Bad) -> int | None:
    if "k" not in item:
        return None
    value = item["k"]
    if isinstance(value, bool) or not isinstance(value, int):
        bad("k", f"must be an integer between 1 and {MAX_K}, {got(value)}")
    elif not 1 <= value <= MAX_K:
        bad("k", f"must be between 1 and {MAX_K}, got {value}")
    else:
        return value
    return None


def check_metadata(data: dict, problems: list[DatasetProblem]) -> Mapping[str, Any] | None:
    """The free-form top-level ``metadata`` object (strict JSON, at most :data:`MAX_METADATA_BYTES`)."""
    if "metadata" not in data or data["metadata"] is None:
        return None
    value = data["metadata"]
    if not isinstance(value, dict):
        problems.append(DatasetProblem(f"must be an object, {got(value)}", field="metadata"))
        return None
    found = json_problems(value, "metadata")
    problems += [DatasetProblem(message, field=where) for where, message in found]
    if found:
        return None
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))
    if size > MAX_METADATA_BYTES:
        problems.append(DatasetProblem(f"is {size:,} bytes of JSON; the limit is {MAX_METADATA_BYTES:,} (1 MB)",
                                       field="metadata"))
        return None
    return value
