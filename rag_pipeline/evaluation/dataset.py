"""Evaluation datasets: read, validate and version a labelled JSON file (seed §2).

Two shapes are accepted::

    [ {"case_id": ..., "question": ..., "relevant_chunk_ids": [...], "k": 6}, ... ]          # seed array
    {"name": "demo", "knowledge_base": "demo", "description": "...", "metadata": {...},
     "cases": [ ... ]}                                                                        # object form

``relevant_chunk_ids`` is a list of chunk ids (grade 1 each) or graded ``{chunk_id: grade}`` with integer
grades 0-10 (0 = judged not relevant: kept, but relevant nowhere); see
:mod:`rag_pipeline.evaluation.dataset_fields`.

**Identity.** A dataset is identified by its file name: ``datasets/foo.json`` is dataset ``foo``, exactly the
Dagster partition key. The optional ``name`` field must equal it (else a validation error naming both);
:func:`parse_dataset` (bytes, e.g. an upload) takes the identity from its ``name=`` / ``default_name=``
argument the same way. A name must be a valid partition key (:func:`valid_dataset_key`).

The bare array names no knowledge base, so the caller (CLI option or Dagster config) must give one.
``metadata`` is a free-form JSON object (at most 1 MB, e.g. what an import skipped); it is not part of the
version and is not stored. Validation collects *every* problem before failing; each line names the file,
the case (index and case_id) and the field. Nothing is written anywhere by this module. The dataset version
is the SHA-256 of the canonical JSON of the validated cases (ids lower-cased, keys sorted, a list-form case
as a list, a graded case as its object), so the same content twice is one version.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag_pipeline.evaluation.dataset_fields import (  # noqa: F401 - limits and grade constants re-exported
    MAX_CASE_ID_CHARS,
    MAX_GRADE,
    MAX_K,
    MAX_METADATA_BYTES,
    MAX_QUESTION_CHARS,
    MAX_RELEVANT_IDS,
    MIN_GRADE,
    RELEVANT_GRADE,
    Judgments,
    check_case_id,
    check_k,
    check_metadata,
    check_question,
    check_relevant,
)
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
from rag_pipeline.storage.files import FileReadError, read_bounded
from rag_pipeline.storage.names import (
    DATASET,
    MAX_DATASET_NAME_CHARS,
    InvalidNameError,
    check_name,
    name_rule,
    printable,
    show_name,
)

MAX_FILE_BYTES = 50 * 1024 * 1024
MAX_CASES = 100_000
MAX_NAME_CHARS = MAX_DATASET_NAME_CHARS  # 200

CASE_FIELDS = ("case_id", "question", "relevant_chunk_ids", "k")
OBJECT_FIELDS = ("name", "knowledge_base", "description", "metadata", "cases")

def valid_dataset_key(key: str) -> bool:
    """Whether ``key`` can be a dataset name: the shared name rule (:func:`rag_pipeline.storage.names.check_name`,
    kind ``dataset``: letters of any script, digits, ``. _ - @``, 1 to :data:`MAX_NAME_CHARS` characters, not
    starting with ``.``, no ``...``), which also makes it a valid Dagster partition key. The one definition
    (the sensor uses it too)."""
    try:
        check_name(DATASET, key)
    except InvalidNameError:
        return False
    return True


@dataclass(frozen=True)
class EvaluationCase:
    """One labelled case.

    ``relevant_chunk_ids`` are the ids that count as relevant (grade >= 1): what every binary consumer
    (label check, miss diagnosis, recall denominator, ``is_relevant``) uses; in file order for a list-form
    case, in id order for a graded one. ``judgments`` is ``None`` for a list-form case (every id grade 1) and,
    for a graded case, every judged ``(id, grade)`` sorted by id, grade-0 ids included. Use :attr:`relevance`
    for metrics (graded gain), :attr:`grades` for display and storage, :meth:`grade` for one chunk.
    """

    case_id: str
    question: str
    relevant_chunk_ids: tuple[str, ...]
    k: int
    judgments: Judgments | None = None

    def __post_init__(self) -> None:
        if self.judgments is not None:
            relevant = tuple(cid for cid, grade in self.judgments if grade >= RELEVANT_GRADE)
            if relevant != tuple(self.relevant_chunk_ids):
                raise ValueError(f"case {self.case_id!r}: relevant_chunk_ids must be the ids of grade >= "
                                 f"{RELEVANT_GRADE} of its judgments")

    @property
    def is_graded(self) -> bool:
        return self.judgments is not None

    @property
    def grades(self) -> dict[str, int]:
        """Every judged id -> grade (grade 0 included); a list-form case gives each id grade 1."""
        if self.judgments is None:
            return dict.fromkeys(self.relevant_chunk_ids, RELEVANT_GRADE)
        return dict(self.judgments)

    @property
    def relevance(self) -> dict[str, int]:
        """Relevant id (grade >= 1) -> grade: the graded relevance :mod:`metrics` takes."""
        return {cid: g for cid, g in self.grades.items() if g >= RELEVANT_GRADE}

    def grade(self, chunk_id: str) -> int | None:
        """The judged grade of ``chunk_id`` (0 = judged not relevant), ``None`` if it was not judged."""
        return self.grades.get(str(chunk_id).lower())

    def as_dict(self) -> dict[str, Any]:
        """The canonical case: ``relevant_chunk_ids`` a list (list form) or ``{id: grade}`` (graded)."""
        relevant: list[str] | dict[str, int] = (
            list(self.relevant_chunk_ids) if self.judgments is None else dict(self.judgments))
        return {"case_id": self.case_id, "question": self.question, "relevant_chunk_ids": relevant, "k": self.k}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvaluationCase:
        """A case from :meth:`as_dict` output (e.g. ``retrieval_evaluation_datasets.cases``), either form."""
        value = data["relevant_chunk_ids"]
        if isinstance(value, Mapping):
            judgments = tuple(sorted((str(cid), int(g)) for cid, g in value.items()))
            relevant = tuple(cid for cid, g in judgments if g >= RELEVANT_GRADE)
            return cls(data["case_id"], data["question"], relevant, int(data["k"]), judgments)
        return cls(data["case_id"], data["question"], tuple(str(i) for i in value), int(data["k"]))


@dataclass(frozen=True)
class Dataset:
    name: str
    knowledge_base: str
    cases: tuple[EvaluationCase, ...]
    content_hash: str
    source_path: str | None = None
    description: str | None = None
    metadata: Mapping[str, Any] | None = None  # free-form, not part of the version, not stored

    @property
    def version(self) -> str:
        """Short form of the content hash, for display."""
        return self.content_hash[:12]

    @property
    def is_graded(self) -> bool:
        """Some case uses the graded ``{chunk_id: grade}`` form."""
        return any(c.is_graded for c in self.cases)


def canonical_cases_json(cases) -> str:
    """The canonical JSON whose SHA-256 is the dataset version (:attr:`Dataset.content_hash`)."""
    return json.dumps([c.as_dict() for c in cases], ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def load_dataset(path: str | Path, *, knowledge_base: str | None = None) -> Dataset:
    """Read and validate a dataset file. ``knowledge_base`` is required for the bare array form and must
    agree with the file's own ``knowledge_base`` otherwise. The dataset's name is the file stem; a ``name``
    field that differs from it is a validation error."""
    path = Path(path)
    source = printable(path)  # an undecodable byte or a control character in the name is shown escaped
    try:
        check_name(DATASET, path.stem)
    except InvalidNameError as exc:
        raise DatasetError(source, [DatasetProblem(
            f"the file name is not a valid dataset name (a dataset is named by its file): {exc}")]) from None
    try:
        raw = read_bounded(path, MAX_FILE_BYTES, what="file")  # a FIFO/device is refused, never read past the limit
    except FileReadError as exc:
        raise DatasetError(source, [DatasetProblem(exc.reason)]) from None
    return parse_dataset(raw, source=source, knowledge_base=knowledge_base, default_name=path.stem,
                         source_path=str(path.resolve()))


def parse_dataset(raw: bytes | str, *, source: str = "<dataset>", knowledge_base: str | None = None,
                  name: str | None = None, default_name: str | None = None,
                  source_path: str | None = None) -> Dataset:
    """Validate dataset bytes (or text); raises :class:`DatasetError` listing every problem.

    The dataset's name is ``name`` (e.g. an upload's name) or else ``default_name`` (the file stem), and the
    file's ``name`` field must equal it; with neither argument the field (or ``"dataset"``) is the name."""
    try:
        data = decode_json(raw, MAX_FILE_BYTES)
    except JsonReadError as exc:
        raise DatasetError(source, [DatasetProblem(str(exc))]) from None
    problems: list[DatasetProblem] = []
    if isinstance(data, list):
        items, file_kb, file_name, description, metadata = data, None, None, None, None
    elif isinstance(data, dict):
        unknown = sorted(set(data) - set(OBJECT_FIELDS))
        if unknown:
            problems.append(DatasetProblem(f"unknown top-level key(s) {unknown}; allowed: {list(OBJECT_FIELDS)}"))
        for key in getattr(data, "duplicate_keys", ()):
            problems.append(DatasetProblem(f"top-level key {key!r} appears more than once"))
        file_kb = _top_string(data, "knowledge_base", problems)
        file_name = _top_string(data, "name", problems)
        description = _top_string(data, "description", problems, limit=10_000)
        metadata = check_metadata(data, problems)
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
    dataset_name = _resolve_name(file_name, name or default_name, problems)
    if not items and not any(p.field == "cases" for p in problems):
        problems.append(DatasetProblem("there are no cases", field="cases"))
    if len(items) > MAX_CASES:
        problems.append(DatasetProblem(f"{len(items)} cases; the limit is {MAX_CASES}", field="cases"))
    cases = _validate_cases(items, problems)
    if problems:
        raise DatasetError(source, problems)
    return Dataset(
        name=dataset_name,
        knowledge_base=kb or "",
        cases=tuple(cases),
        content_hash=hashlib.sha256(canonical_cases_json(cases).encode("utf-8")).hexdigest(),
        source_path=source_path,
        description=description,
        metadata=metadata,
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


def _resolve_name(file_name: str | None, given: str | None, problems: list[DatasetProblem]) -> str:
    """The dataset's identity: ``given`` (file stem or the caller's name), which the field must equal."""
    if given and file_name is not None and file_name != given:
        problems.append(DatasetProblem(
            f"{file_name!r} differs from the file name {given!r}: a dataset is identified by its file name; "
            "rename the file or change the field", field="name"))
    name = given or file_name or "dataset"
    try:
        check_name(DATASET, name)
    except InvalidNameError as exc:
        where = "the file name" if given else "the name"
        problems.append(DatasetProblem(
            f"{where} {show_name(name)} is not a valid dataset name: {exc.reason}; {name_rule(DATASET)} "
            "(it is the Dagster partition key)", field=None if given else "name"))
    return name


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
        cid = check_case_id(item, bad)
        if cid is not None:
            if cid in first_index:
                bad("case_id", f"duplicate case_id; first used by cases[{first_index[cid]}]")
            else:
                first_index[cid] = index
        question = check_question(item, bad)
        labels = check_relevant(item, bad)
        k = check_k(item, bad)
        if len(problems) == before and None not in (cid, question, labels, k):
            cases.append(EvaluationCase(cid, question, labels[0], k, labels[1]))
    return cases
