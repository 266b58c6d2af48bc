"""An evaluation dataset file (docs/design.md §2, §12.1): pydantic models of its two forms and of a case, and its
published JSON Schema (:func:`dataset_json_schema`, ``schemas/evaluation-dataset-v1.json``). The rules no single
value shows are :func:`rag_pipeline.evaluation.datasets.load.parse_dataset`'s."""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, RootModel, Tag
from pydantic.config import JsonDict

MAX_CASES = 100_000
MAX_RELEVANT_IDS = 1000
MAX_K = 1000
MAX_QUESTION_CHARS = 10_000
MAX_CASE_ID_CHARS = 200
MAX_NAME_CHARS = 200
MAX_DESCRIPTION_CHARS = 10_000
MAX_METADATA_BYTES = 1024 * 1024
MAX_REFERENCE_ANSWERS = 50
MAX_REFERENCE_ANSWER_CHARS = 2_000
MAX_KEY_POINTS = 50
MAX_KEY_POINT_CHARS = 1_000
MIN_GRADE, MAX_GRADE = 0, 10
RELEVANT_GRADE = 1
"""The lowest grade that counts as relevant (precision, recall, MRR, AP, ``is_relevant``, miss diagnosis)."""

_SPACE = "".join(f"\\u{ord(c):04x}" for c in map(chr, range(0x3001)) if c.isspace())  # what str.strip() strips
_HEX = "[0-9a-fA-F]"
UUID_PATTERN = rf"^[{_SPACE}]*{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}[{_SPACE}]*$"
NAME_PATTERN = r"^[^.\-\s/\\|,\[\]\x00-\x1f\x7f][^\s/\\|,\[\]\x00-\x1f\x7f]*$"


def visible_text(value: str) -> str:
    """``value`` without whitespace and invisible (format) characters such as U+200B: empty when a person would
    see nothing."""
    return "".join(ch for ch in value if not ch.isspace() and unicodedata.category(ch) != "Cf")


def identifier_problem(value: str) -> str | None:
    """Why ``value`` cannot be an identifier (a case_id): a control character or an invisible one inside it
    (``c\u200b1`` would look like ``c1``); ``None`` if it can. Compared NFC-normalised and stripped."""
    for ch in value.strip():
        category = unicodedata.category(ch)
        if category in ("Cc", "Cf"):
            kind = "control" if category == "Cc" else "invisible"
            return f"contains the {kind} character \\u{ord(ch):04x}; an id must be plain visible text"
    return None


def normal_identifier(value: str) -> str:
    """The form an identifier is compared and stored in: NFC-normalised, surrounding whitespace stripped."""
    return unicodedata.normalize("NFC", value.strip())


def _text(limit: int, empty: str = "must not be empty", grouped: bool = False,
          identifier: bool = False) -> AfterValidator:
    """A non-empty string of at most ``limit`` characters that PostgreSQL can store (no NUL, no lone surrogate)
    and a person can see (not invisible characters only); ``identifier``: no control or invisible character."""

    def check(value: str) -> str:
        if not value.strip():
            raise ValueError(empty)
        if len(value) > limit:
            raise ValueError(f"is {len(value):,} characters; the limit is {limit:,}" if grouped
                             else f"is {len(value)} characters; the limit is {limit}")
        if "\x00" in value:
            raise ValueError("contains a NUL character (\\u0000), which PostgreSQL cannot store")
        try:
            value.encode("utf-8")  # fails on a lone surrogate only
        except UnicodeEncodeError:
            raise ValueError("contains an unpaired UTF-16 surrogate (invalid Unicode)") from None
        if not visible_text(value):
            raise ValueError("has only invisible characters (such as U+200B zero width space)")
        if identifier and (problem := identifier_problem(value)):
            raise ValueError(problem)
        return value

    return AfterValidator(check)


def _text_schema(limit: int, schema: JsonDict | None = None) -> Any:
    """The JSON Schema of a :func:`_text` string."""
    return Field(json_schema_extra={"minLength": 1, "maxLength": limit, "pattern": r"\S", **(schema or {})})


def _object_schema(schema: dict[str, Any]) -> None:
    """Every key a chunk id (pydantic writes ``patternProperties``, which lets other keys through)."""
    ((pattern, grade),) = schema.pop("patternProperties").items()
    schema.update(propertyNames={"pattern": pattern}, additionalProperties=grade)


SOME_RELEVANT_SCHEMA: JsonDict = {"minItems": 1, "minProperties": 1,
                        "not": {"type": "object", "additionalProperties": {"const": 0}}}
"""``relevant_chunk_ids`` of an answerable case: at least one id, or one grade >= 1 (the validator's words:
:mod:`rag_pipeline.evaluation.datasets.problems`)."""
NO_RELEVANT_SCHEMA: JsonDict = {"maxItems": 0, "additionalProperties": {"const": 0}}
"""``relevant_chunk_ids`` of an unanswerable case: no id, or only grades 0 (judged not relevant)."""

CaseId = Annotated[str, _text(MAX_CASE_ID_CHARS, grouped=True, identifier=True), _text_schema(MAX_CASE_ID_CHARS)]
Question = Annotated[str, _text(MAX_QUESTION_CHARS, "must not be empty or whitespace only", grouped=True),
                     _text_schema(MAX_QUESTION_CHARS)]
DatasetName = Annotated[str, _text(MAX_NAME_CHARS), _text_schema(MAX_NAME_CHARS, {
    "pattern": NAME_PATTERN, "not": {"pattern": r"\.\.\."}})]
KnowledgeBaseName = Annotated[str, _text(MAX_NAME_CHARS), _text_schema(MAX_NAME_CHARS)]
Description = Annotated[str, _text(MAX_DESCRIPTION_CHARS), _text_schema(MAX_DESCRIPTION_CHARS)]
ChunkId = Annotated[str, Field(pattern=UUID_PATTERN)]
Grade = Annotated[int, Field(ge=MIN_GRADE, le=MAX_GRADE)]
ChunkIdList = Annotated[list[ChunkId], Field(max_length=MAX_RELEVANT_IDS, json_schema_extra={"uniqueItems": True},
                                             description="chunk ids (document_chunks.id), each grade 1")]
Judgments = Annotated[dict[ChunkId, Grade], Field(
    max_length=MAX_RELEVANT_IDS, json_schema_extra=_object_schema,
    description=f"graded: chunk id -> integer grade {MIN_GRADE}-{MAX_GRADE} (0 = judged not relevant); "
                "at least one grade >= 1 unless the case is unanswerable")]
ReferenceAnswers = Annotated[list[Annotated[str, _text(MAX_REFERENCE_ANSWER_CHARS, grouped=True),
                                             _text_schema(MAX_REFERENCE_ANSWER_CHARS)]], Field(
    None, min_length=1, max_length=MAX_REFERENCE_ANSWERS,
    description="correct answers, aliases of each other (docs/design.md §12.1); at least one when present")]
KeyPoints = Annotated[list[Annotated[str, _text(MAX_KEY_POINT_CHARS, grouped=True),
                                      _text_schema(MAX_KEY_POINT_CHARS)]], Field(
    None, min_length=1, max_length=MAX_KEY_POINTS,
    description="what a good answer should contain; at least one when present")]


MAX_JUDGMENTS = 10_000
MAX_ANNOTATORS = 100
Annotator = Annotated[str, _text(MAX_NAME_CHARS, identifier=True), _text_schema(MAX_NAME_CHARS)]


class CaseJudgment(BaseModel):
    """One person's grade of one chunk for a case (docs/labelling.md, "Several annotators"); ``adjudicated``: the
    grade that settles a disagreement, which the labels take whatever the others say."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    annotator: Annotator = Field(description="one of the file's top-level `annotators`")
    chunk_id: ChunkId
    grade: Grade
    adjudicated: bool = False


def _form(value: Any) -> str | None:
    """``list`` or ``object``: which form of ``relevant_chunk_ids`` a value is (``None``: neither)."""
    return "list" if isinstance(value, list) else "object" if isinstance(value, dict) else None


class DatasetCase(BaseModel):
    """One labelled case as the file holds it (ids as written, a graded object in its key order). An answerable
    case needs a relevant chunk, an unanswerable one has none (the schema's ``if``/``then``/``else``; the validator
    checks it across the fields)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", json_schema_extra={
        "if": {"properties": {"answerable": {"const": False}}, "required": ["answerable"]},
        "then": {"properties": {"relevant_chunk_ids": NO_RELEVANT_SCHEMA}},
        "else": {"properties": {"relevant_chunk_ids": SOME_RELEVANT_SCHEMA}}})

    case_id: CaseId
    question: Question
    relevant_chunk_ids: Annotated[Annotated[ChunkIdList, Tag("list")] | Annotated[Judgments, Tag("object")],
                                  Discriminator(_form)]
    k: Annotated[int, Field(ge=1, le=MAX_K)]
    reference_answers: ReferenceAnswers  # absent: None (the alias's default); null is refused like any non-array
    answerable: bool = Field(True, description="false: the knowledge base has no answer; the right answer is a "
                                               "refusal (docs/design.md §12.1)")
    key_points: KeyPoints
    judgments: list[CaseJudgment] | None = Field(
        None, min_length=1, max_length=MAX_JUDGMENTS,
        description="every annotator's grades (docs/labelling.md); relevant_chunk_ids must then be their resolution")


CASE_FIELDS = tuple(DatasetCase.model_fields)
REQUIRED_CASE_FIELDS = tuple(name for name, f in DatasetCase.model_fields.items() if f.is_required())
OPTIONAL_CASE_FIELDS = tuple(name for name in CASE_FIELDS if name not in REQUIRED_CASE_FIELDS)
Cases = Annotated[list[DatasetCase], Field(min_length=1, json_schema_extra={"maxItems": MAX_CASES})]


class DatasetFile(BaseModel):
    """The object form of a dataset file (the bare array is its ``cases`` alone)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", title="object form")

    name: DatasetName | None = Field(
        None, description="must equal the file name without .json (the dataset's identity)")
    knowledge_base: KnowledgeBaseName | None = None
    description: Description | None = None
    metadata: dict[str, Any] | None = Field(None, description="free-form (at most 1 MB); not part of the version")
    answer_convention: Literal["squad", "cmrc", "auto"] | None = Field(
        None, description="how answers are scored: squad, cmrc or auto (per reference); absent: from the "
                          "knowledge base's text mode (docs/answers.md); not part of the version")
    annotators: list[Annotator] | None = Field(
        None, min_length=1, max_length=MAX_ANNOTATORS,
        description="who may judge (a case's `judgments` name them); required with judgments; not part of the "
                    "version")
    cases: Cases


OBJECT_FIELDS = tuple(DatasetFile.model_fields)


class DatasetDocument(RootModel[Annotated[Cases, Field(title="array of cases")] | DatasetFile]):
    """A whole dataset file, either form: what the JSON Schema describes."""

    model_config = ConfigDict(title="rag_pipeline evaluation dataset", json_schema_extra={
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://rag-pipeline.invalid/schemas/evaluation-dataset-v1.json"})


def dataset_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a dataset file; the validator checks a little more."""
    return DatasetDocument.model_json_schema()


class StoredDataset(BaseModel):
    """A validated dataset file stored as a dataset version (``path`` None: stored through the HTTP API)."""

    dataset_id: str
    name: str
    version: str
    knowledge_base: str
    path: str | None
    cases: int
    relevant_ids: int
    relevant_ids_not_in_kb: int
    k_min: int
    k_max: int


class DatasetRunPlan(BaseModel):
    """What the Dagster sensor should do with one dataset file: ``problems`` (invalid: add no partition), or the
    strategy versions to run and why the others are skipped (``{version: reason}``); ``dataset_version``: the
    dataset's version (the short hash of its cases, not of the file)."""

    to_run: tuple[str, ...] = ()
    skipped: dict[str, str] = Field(default_factory=dict)
    problems: str | None = None
    dataset_version: str | None = None
