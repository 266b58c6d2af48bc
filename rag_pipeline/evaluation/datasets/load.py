"""Evaluation datasets: read, validate and version a labelled JSON file (docs/design.md §2); the shapes are
:mod:`rag_pipeline.contracts.dataset`'s. Nothing is written by this module."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag_pipeline.contracts.dataset import RELEVANT_GRADE, DatasetCase, normal_identifier
from rag_pipeline.evaluation.datasets import external_labels
from rag_pipeline.evaluation.datasets.external_labels import Mapper
from rag_pipeline.evaluation.datasets.judgments import Judgment, judgments_of
from rag_pipeline.evaluation.datasets.official import is_official, official_cases
from rag_pipeline.evaluation.datasets.problems import file_problems
from rag_pipeline.evaluation.datasets.strict_json import (
    MAX_LISTED_PROBLEMS,
    DatasetError,
    DatasetProblem,
    JsonReadError,
    ScanLimitError,
    decode_json,
    type_name,
)
from rag_pipeline.storage.files import FileReadError, read_bounded
from rag_pipeline.storage.names import DATASET, InvalidNameError, check_name, name_rule, printable, show_name

MAX_FILE_BYTES = 50 * 1024 * 1024
Judgments = tuple[tuple[str, int], ...]


def valid_dataset_key(key: str) -> bool:
    """Whether ``key`` can be a dataset name (the shared name rule, docs/design.md §2.4): also a valid Dagster
    partition key."""
    try:
        check_name(DATASET, key)
    except InvalidNameError:
        return False
    return True


@dataclass(frozen=True)
class EvaluationCase:
    """One labelled case (docs/design.md §2.3). ``relevant_chunk_ids``: the ids of grade >= 1 (file order for a
    list-form case, id order for a graded one); ``judgments``: ``None`` for a list-form case, else every judged
    ``(id, grade)`` sorted by id, grade 0 included. The answer fields (docs/design.md §12.1) as in the file:
    ``reference_answers`` and ``key_points`` (``()`` when absent), ``answerable`` (``False``: a refusal is right;
    then ``relevant_chunk_ids`` may be empty). ``annotator_judgments``: the file's per-annotator ``judgments``
    (docs/labelling.md), whose resolution ``relevant_chunk_ids`` is."""

    case_id: str
    question: str
    relevant_chunk_ids: tuple[str, ...]
    k: int
    judgments: Judgments | None = None
    reference_answers: tuple[str, ...] = ()
    answerable: bool = True
    key_points: tuple[str, ...] = ()
    annotator_judgments: tuple[Judgment, ...] = ()

    def __post_init__(self) -> None:
        if not self.answerable and self.relevant_chunk_ids:
            raise ValueError(f"case {self.case_id!r}: an unanswerable case has no relevant chunk")
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
        """The canonical case: ``relevant_chunk_ids`` a list (list form) or ``{id: grade}`` (graded); an answer
        field only when it is set (non-empty, or ``answerable`` false), so a case without them keeps the version
        it always had (docs/design.md §12.1)."""
        relevant: list[str] | dict[str, int] = (
            list(self.relevant_chunk_ids) if self.judgments is None else dict(self.judgments))
        data: dict[str, Any] = {"case_id": self.case_id, "question": self.question, "relevant_chunk_ids": relevant,
                                "k": self.k}
        if self.reference_answers:
            data["reference_answers"] = list(self.reference_answers)
        if not self.answerable:
            data["answerable"] = False
        if self.key_points:
            data["key_points"] = list(self.key_points)
        if self.annotator_judgments:
            data["judgments"] = [j.as_dict() for j in self.annotator_judgments]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvaluationCase:
        """A case from :meth:`as_dict` output (e.g. ``retrieval_evaluation_datasets.cases``), either form."""
        value = data["relevant_chunk_ids"]
        judgments = (tuple(sorted((str(cid), int(g)) for cid, g in value.items()))
                     if isinstance(value, Mapping) else None)
        relevant = (tuple(cid for cid, g in judgments if g >= RELEVANT_GRADE) if judgments is not None
                    else tuple(str(i) for i in value))
        return cls(data["case_id"], data["question"], relevant, int(data["k"]), judgments,
                   reference_answers=tuple(str(a) for a in data.get("reference_answers") or ()),
                   answerable=bool(data.get("answerable", True)),
                   key_points=tuple(str(p) for p in data.get("key_points") or ()),
                   annotator_judgments=tuple(Judgment(j["annotator"], j["chunk_id"], int(j["grade"]),
                                                      bool(j.get("adjudicated", False)))
                                             for j in data.get("judgments") or ()))


@dataclass(frozen=True)
class Dataset:
    name: str
    knowledge_base: str
    cases: tuple[EvaluationCase, ...]
    content_hash: str
    source_path: str | None = None
    description: str | None = None
    metadata: Mapping[str, Any] | None = None  # free-form, not part of the version, not stored
    answer_convention: str | None = None  # squad, cmrc or auto; None: from the KB's text mode (not stored)

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


def load_dataset(path: str | Path, *, knowledge_base: str | None = None,
                 labels_of: Callable[[str], Mapper | None] | None = None) -> Dataset:
    """Read and validate a dataset file, named by its stem; ``knowledge_base`` is required for the bare array
    form and must agree with the file's own otherwise. ``labels_of``: given the knowledge base's name, how its
    labels that are no UUID map to chunk UUIDs (:mod:`.external_labels`), or None."""
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
                         source_path=str(path.resolve()), labels_of=labels_of)


def parse_dataset(raw: bytes | str, *, source: str = "<dataset>", knowledge_base: str | None = None,
                  name: str | None = None, default_name: str | None = None, source_path: str | None = None,
                  labels_of: Callable[[str], Mapper | None] | None = None) -> Dataset:
    """Validate dataset bytes (or text); :class:`DatasetError` lists every problem. The name: ``name`` or else
    ``default_name`` (which the ``name`` field must equal), with neither the field (or ``"dataset"``)."""
    try:
        data = decode_json(raw, MAX_FILE_BYTES)
    except JsonReadError as exc:
        raise DatasetError(source, [DatasetProblem(str(exc))]) from None
    except ScanLimitError as exc:
        raise DatasetError(source, [DatasetProblem(str(exc), field="cases", case_index=exc.case_index)]) from None
    named = external_labels.knowledge_base_named(data, knowledge_base) if labels_of else None
    to_chunk = labels_of(named) if labels_of and named else None
    if to_chunk is not None:
        data = external_labels.map_labels(data, to_chunk)
    return validate_dataset(data, source=source, knowledge_base=knowledge_base, name=name,
                            default_name=default_name, source_path=source_path)


def validate_dataset(data: Any, *, source: str = "<dataset>", knowledge_base: str | None = None,
                     name: str | None = None, default_name: str | None = None,
                     source_path: str | None = None) -> Dataset:
    """:func:`parse_dataset` of a document already read by :func:`~.strict_json.decode_json` (its objects
    remember their duplicate keys), e.g. the ``cases`` of a request body."""
    if not isinstance(data, (list, dict)):
        raise DatasetError(source, [DatasetProblem(
            f"the top level must be an array of cases or an object with 'cases', got {type_name(data)}")])
    if isinstance(data, dict) and is_official(data):
        return _official(data, source=source, knowledge_base=knowledge_base, name=name or default_name,
                         source_path=source_path)
    header: dict[str, Any] = data if isinstance(data, dict) else {"cases": data}
    check = file_problems(header, MAX_LISTED_PROBLEMS)
    problems = [p for _, p in check.keyed]
    valid = {key: None if any(p.field == key and p.case_index is None for p in problems) else header.get(key)
             for key in ("knowledge_base", "name")}
    kb = _resolve_kb(valid["knowledge_base"], knowledge_base, problems)
    dataset_name = _resolve_name(valid["name"], name or default_name, problems)
    own = problems[len(check.keyed):]
    if check.keyed or own:
        keyed = check.keyed + [((-1, 7), p) for p in own]  # after the top-level fields, before the cases
        raise DatasetError(source, [p for _, p in sorted(keyed, key=lambda kp: kp[0])], more=check.more)
    cases = tuple(_case(c) for c in check.cases)
    return Dataset(name=dataset_name, knowledge_base=kb or "", cases=cases,
                   content_hash=hashlib.sha256(canonical_cases_json(cases).encode("utf-8")).hexdigest(),
                   source_path=source_path, description=check.description, metadata=header.get("metadata"),
                   answer_convention=header.get("answer_convention"))


def _official(data: dict, *, source: str, knowledge_base: str | None, name: str | None,
              source_path: str | None) -> Dataset:
    """A SQuAD v2.0 / CMRC 2018 file (:mod:`.official`) as a dataset of ``knowledge_base``, with its convention."""
    problems: list[DatasetProblem] = []
    kb = _resolve_kb(None, knowledge_base, problems)
    dataset_name = _resolve_name(None, name, problems)
    raw_cases, convention = official_cases(data, problems)
    if problems:
        raise DatasetError(source, problems)
    cases = tuple(EvaluationCase.from_dict(c) for c in raw_cases)
    return Dataset(name=dataset_name, knowledge_base=kb or "", cases=cases,
                   content_hash=hashlib.sha256(canonical_cases_json(cases).encode("utf-8")).hexdigest(),
                   source_path=source_path, answer_convention=convention)


def _case(case: DatasetCase) -> EvaluationCase:
    """The validated case, ids lower-cased (unique after that: the validator checks it)."""
    value = case.relevant_chunk_ids
    ids = ([i.strip().lower() for i in value] if isinstance(value, list)
           else {i.strip().lower(): grade for i, grade in value.items()})
    return EvaluationCase.from_dict({"case_id": normal_identifier(case.case_id), "question": case.question,
                                     "relevant_chunk_ids": ids,
                                     "k": case.k, "reference_answers": case.reference_answers,
                                     "answerable": case.answerable, "key_points": case.key_points,
                                     "judgments": [j.as_dict() for j in judgments_of(case.judgments or ())]})


def _resolve_name(file_name: str | None, given: str | None, problems: list[DatasetProblem]) -> str:
    """The dataset's identity: ``given`` (file stem or the caller's name), which the field must equal; both
    NFC-normalised (a file named on macOS is NFD)."""
    given, file_name = (unicodedata.normalize("NFC", v) if isinstance(v, str) else v for v in (given, file_name))
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


def relevant_ids_of(value: Any) -> list[str]:
    """The ids that count as relevant of a raw ``relevant_chunk_ids`` value: every entry of a list (as
    given, duplicates and malformed ids included), the keys of grade >= 1 of an object."""
    if isinstance(value, Mapping):
        return [str(k) for k, g in value.items()
                if isinstance(g, int) and not isinstance(g, bool) and g >= RELEVANT_GRADE]
    return [str(i) for i in value]
