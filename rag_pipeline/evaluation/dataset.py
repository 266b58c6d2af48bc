"""Evaluation datasets: read, validate and version a labelled JSON file (seed §2).

Two shapes are accepted::

    [ {"case_id": ..., "question": ..., "relevant_chunk_ids": [...], "k": 6}, ... ]          # seed array
    {"name": "demo", "knowledge_base": "demo", "description": "...", "cases": [ ... ]}      # object form

The bare array names no knowledge base, so the caller (CLI option or Dagster config) must give one.
Validation collects *every* problem before failing; each line names the file, the case (index and
case_id) and the field. Nothing is written anywhere by this module. The dataset version is the SHA-256
of the canonical JSON of the validated cases, so the same content twice is one version.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag_pipeline.evaluation.dataset_json import (  # noqa: F401 - DatasetError/DatasetProblem are this module's API
    DatasetError,
    DatasetProblem,
    JsonReadError,
    decode_json,
    got,
    show,
    text_problem,
    type_name,
)

MAX_FILE_BYTES = 50 * 1024 * 1024
MAX_CASES = 100_000
MAX_K = 1000
MAX_QUESTION_CHARS = 10_000
MAX_CASE_ID_CHARS = 200
MAX_RELEVANT_IDS = 1000
MAX_NAME_CHARS = 200

CASE_FIELDS = ("case_id", "question", "relevant_chunk_ids", "k")
OBJECT_FIELDS = ("name", "knowledge_base", "description", "cases")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


@dataclass(frozen=True)
class EvaluationCase:
    case_id: str
    question: str
    relevant_chunk_ids: tuple[str, ...]
    k: int

    def as_dict(self) -> dict[str, Any]:
        return {"case_id": self.case_id, "question": self.question,
                "relevant_chunk_ids": list(self.relevant_chunk_ids), "k": self.k}


@dataclass(frozen=True)
class Dataset:
    name: str
    knowledge_base: str
    cases: tuple[EvaluationCase, ...]
    content_hash: str
    source_path: str | None = None
    description: str | None = None

    @property
    def version(self) -> str:
        """Short form of the content hash, for display."""
        return self.content_hash[:12]


def load_dataset(path: str | Path, *, knowledge_base: str | None = None, name: str | None = None) -> Dataset:
    """Read and validate a dataset file. ``knowledge_base`` is required for the bare array form and must
    agree with the file's own ``knowledge_base`` otherwise; ``name`` defaults to the file's ``name`` or stem."""
    path = Path(path)
    source = str(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise DatasetError(source, [DatasetProblem(f"cannot read the file: {exc.strerror or exc}")]) from None
    if size > MAX_FILE_BYTES:
        raise DatasetError(source, [DatasetProblem(
            f"file is {size / 1024 / 1024:.1f} MB; the limit is {MAX_FILE_BYTES // 1024 // 1024} MB")])
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DatasetError(source, [DatasetProblem(f"cannot read the file: {exc.strerror or exc}")]) from None
    return parse_dataset(raw, source=source, knowledge_base=knowledge_base, name=name or None,
                         default_name=path.stem, source_path=str(path.resolve()))


def parse_dataset(raw: bytes | str, *, source: str = "<dataset>", knowledge_base: str | None = None,
                  name: str | None = None, default_name: str | None = None,
                  source_path: str | None = None) -> Dataset:
    """Validate dataset bytes (or text); raises :class:`DatasetError` listing every problem."""
    try:
        data = decode_json(raw, MAX_FILE_BYTES)
    except JsonReadError as exc:
        raise DatasetError(source, [DatasetProblem(str(exc))]) from None
    problems: list[DatasetProblem] = []
    if isinstance(data, list):
        items, file_kb, file_name, description = data, None, None, None
    elif isinstance(data, dict):
        unknown = sorted(set(data) - set(OBJECT_FIELDS))
        if unknown:
            problems.append(DatasetProblem(f"unknown top-level key(s) {unknown}; allowed: {list(OBJECT_FIELDS)}"))
        for key in getattr(data, "duplicate_keys", ()):
            problems.append(DatasetProblem(f"top-level key {key!r} appears more than once"))
        file_kb = _top_string(data, "knowledge_base", problems)
        file_name = _top_string(data, "name", problems)
        description = _top_string(data, "description", problems, limit=10_000)
        if "cases" not in data:
            problems.append(DatasetProblem("the top-level object has no 'cases' array", field="cases"))
            items = []
        elif not isinstance(data["cases"], list):
            problems.append(DatasetProblem(f"must be an array of cases, got {type_name(data['cases'])}",
                                           field="cases"))
            items = []
        else:
            items = data["cases"]
    else:
        raise DatasetError(source, [DatasetProblem(
            f"the top level must be an array of cases or an object with 'cases', got {type_name(data)}")])

    kb = _resolve_kb(file_kb, knowledge_base, problems)
    if not items and not any(p.field == "cases" for p in problems):
        problems.append(DatasetProblem("there are no cases", field="cases"))
    if len(items) > MAX_CASES:
        problems.append(DatasetProblem(f"{len(items)} cases; the limit is {MAX_CASES}", field="cases"))
    cases = _validate_cases(items, problems)
    if problems:
        raise DatasetError(source, problems)
    canonical = json.dumps([c.as_dict() for c in cases], ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return Dataset(
        name=name or file_name or default_name or "dataset",
        knowledge_base=kb or "",
        cases=tuple(cases),
        content_hash=hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
        source_path=source_path,
        description=description,
    )


def _top_string(data: dict, key: str, problems: list[DatasetProblem], limit: int = MAX_NAME_CHARS) -> str | None:
    if key not in data or data[key] is None:
        return None
    value = data[key]
    if not isinstance(value, str):
        problems.append(DatasetProblem(f"must be a string, got {type_name(value)}", field=key))
    elif not value.strip():
        problems.append(DatasetProblem("must not be empty", field=key))
    elif len(value) > limit:
        problems.append(DatasetProblem(f"is {len(value)} characters; the limit is {limit}", field=key))
    elif bad := text_problem(value):
        problems.append(DatasetProblem(bad, field=key))
    else:
        return value
    return None


def _resolve_kb(file_kb: str | None, given: str | None, problems: list[DatasetProblem]) -> str | None:
    if given and file_kb and given != file_kb:
        problems.append(DatasetProblem(
            f"the file names knowledge base {file_kb!r} but {given!r} was requested", field="knowledge_base"))
    kb = given or file_kb
    if not kb and not any(p.field == "knowledge_base" for p in problems):
        problems.append(DatasetProblem(
            "no knowledge base: use the object form {\"knowledge_base\": ..., \"cases\": [...]} "
            "or pass one (--knowledge-base / Dagster config knowledge_base)", field="knowledge_base"))
    return kb


def _validate_cases(items: list, problems: list[DatasetProblem]) -> list[EvaluationCase]:
    cases: list[EvaluationCase] = []
    first_index: dict[str, int] = {}
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            problems.append(DatasetProblem(f"each case must be an object, got {type_name(item)}", case_index=index))
            continue
        case_id = item.get("case_id") if isinstance(item.get("case_id"), str) else None
        before = len(problems)

        def bad(field: str | None, message: str, _index: int = index, _cid: str | None = case_id) -> None:
            problems.append(DatasetProblem(message, field=field, case_index=_index, case_id=_cid))

        for key in getattr(item, "duplicate_keys", ()):
            bad(key, "appears more than once in this case")
        for key in sorted(set(item) - set(CASE_FIELDS)):
            bad(key, f"unknown field; a case has exactly {list(CASE_FIELDS)}")
        for key in CASE_FIELDS:
            if key not in item:
                bad(key, "is missing")
        cid = _check_case_id(item, bad)
        if cid is not None:
            if cid in first_index:
                bad("case_id", f"duplicate case_id; first used by cases[{first_index[cid]}]")
            else:
                first_index[cid] = index
        question = _check_question(item, bad)
        ids = _check_ids(item, bad)
        k = _check_k(item, bad)
        if len(problems) == before and None not in (cid, question, ids, k):
            cases.append(EvaluationCase(cid, question, ids, k))
    return cases


def _check_text(item: dict, bad, field: str, limit: int, empty: str) -> str | None:
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


def _check_case_id(item: dict, bad) -> str | None:
    return _check_text(item, bad, "case_id", MAX_CASE_ID_CHARS, "must not be empty")


def _check_question(item: dict, bad) -> str | None:
    return _check_text(item, bad, "question", MAX_QUESTION_CHARS, "must not be empty or whitespace only")
    value = item["question"]
    if not isinstance(value, str):
        bad("question", f"must be a string, {got(value)}")
    elif not value.strip():
        bad("question", "must not be empty or whitespace only")
    elif len(value) > MAX_QUESTION_CHARS:
        bad("question", f"is {len(value):,} characters; the limit is {MAX_QUESTION_CHARS:,}")
    elif problem := text_problem(value):
        bad("question", problem)
    else:
        return value
    return None


def _check_ids(item: dict, bad) -> tuple[str, ...] | None:
    if "relevant_chunk_ids" not in item:
        return None
    value = item["relevant_chunk_ids"]
    field = "relevant_chunk_ids"
    if not isinstance(value, list):
        bad(field, f"must be an array of chunk id strings, {got(value)}")
        return None
    if not value:
        bad(field, "is empty; every case needs at least one relevant chunk id (document_chunks.id)")
        return None
    if len(value) > MAX_RELEVANT_IDS:
        bad(field, f"has {len(value)} ids; the limit is {MAX_RELEVANT_IDS}")
        return None
    ids: dict[str, int] = {}
    ok = True
    for pos, chunk_id in enumerate(value):
        if not isinstance(chunk_id, str):
            bad(f"{field}[{pos}]", f"must be a string chunk id, {got(chunk_id)}")
            ok = False
        elif not _UUID.fullmatch(chunk_id.strip()):
            bad(f"{field}[{pos}]", f"{show(chunk_id)} is not a UUID (chunk ids are document_chunks.id, "
                                   "e.g. 30465673-88ea-41f0-a5a0-da496592f3df)")
            ok = False
        else:
            normal = chunk_id.strip().lower()
            if normal in ids:
                bad(f"{field}[{pos}]", f"duplicate id {chunk_id!r} (same as {field}[{ids[normal]}])")
                ok = False
            else:
                ids[normal] = pos
    return tuple(ids) if ok else None


def _check_k(item: dict, bad) -> int | None:
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
