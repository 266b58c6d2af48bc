"""The label draft: pooled candidates of several strategies per question, judged by a person (its format and
behaviour: :mod:`rag_pipeline.service.labelling.drafts`), its export, and the label fixes of ``fix-labels``
(:mod:`rag_pipeline.service.labelling.fixes`)."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from rag_pipeline.contracts.catalog import UploadResult
from rag_pipeline.contracts.dataset import MAX_GRADE, MAX_K

FORMAT: Final = "rag-pipeline-label-draft"
FORMAT_VERSION: Final = 1
STATUSES = ("pending", "judged", "skipped")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class DraftCandidate(_Strict):
    chunk_id: str
    document_id: str
    document_name: str
    ordinal: int
    char_start: int
    char_end: int
    text: str
    found_by: dict[str, int] = Field(default_factory=dict)
    grade: int | None = Field(None, ge=0, le=MAX_GRADE)


class DraftQuestion(_Strict):
    case_id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    k: int = Field(10, ge=1, le=MAX_K)
    status: Literal["pending", "judged", "skipped"] = "pending"
    candidates: list[DraftCandidate]
    # the answer fields of a dataset case the draft was read from, carried to the export (docs/design.md §12.1)
    reference_answers: list[str] | None = None
    answerable: bool = True
    key_points: list[str] | None = None

    def relevant(self) -> list[DraftCandidate]:
        return [c for c in self.candidates if (c.grade or 0) >= 1]

    def answer_fields(self) -> dict:
        """The answer fields that are set, as a dataset case writes them."""
        return {k: v for k, v in (("reference_answers", self.reference_answers), ("answerable", self.answerable),
                                  ("key_points", self.key_points)) if v is not None and v is not True}

    @model_serializer(mode="wrap")
    def _without_unset_answer_fields(self, handler) -> dict:
        """A draft written without answer fields looks as it always did."""
        data = handler(self)
        return {k: v for k, v in data.items()
                if k not in ("reference_answers", "answerable", "key_points") or k in self.answer_fields()}


class Draft(_Strict):
    format: Literal["rag-pipeline-label-draft"] = FORMAT
    format_version: Literal[1] = FORMAT_VERSION
    knowledge_base: str = Field(min_length=1)
    name: str | None = None
    strategies: list[str]
    strategies_left_out: dict[str, str] = Field(
        default_factory=dict, description="Registry strategies not pooled because they cannot run on the "
                                          "knowledge base, each with why (only when none were named).")
    depth: int = Field(ge=1)
    created_at: str
    position: int = Field(0, ge=0)
    questions: list[DraftQuestion] = Field(min_length=1)

    def progress(self) -> dict[str, int]:
        """Questions per status."""
        return {s: sum(q.status == s for q in self.questions) for s in STATUSES}


class LeftOut(BaseModel):
    case_id: str
    reason: str


class DraftExport(BaseModel):
    """A judged draft written as a dataset file (``path``) or stored as a dataset version (``dataset_id``);
    ``labels``: the label check's summary."""

    dataset: str
    knowledge_base: str
    cases: int
    labels: str
    left_out: list[LeftOut]
    unfinished: list[LeftOut] = Field(default_factory=list, description="Cases exported while their question is "
                                      "still pending (some candidates graded, the question not marked done).")
    path: str | None = None
    dataset_id: str | None = None


class FixCandidate(BaseModel):
    """A chunk a listed label could become (dumped with ``exclude_unset``: only the fields its case knows)."""

    chunk_id: str
    ordinal: int | None = None
    char_start: int | None = None
    char_end: int | None = None
    overlap: float | None = None
    document_name: str | None = None


class LabelChange(BaseModel):
    """One label ``fix-labels`` fixed (``new_chunk_ids`` set) or listed for a person (dumped with ``exclude_unset``)."""

    case_id: str
    old_chunk_id: str
    status: str
    new_chunk_ids: list[str]
    overlap: dict[str, float] | None = None
    reason: str | None
    document_name: str | None = None
    old_span: list[int] | None = None
    candidates: list[FixCandidate] | None = None


class FixCounts(BaseModel):
    labels: int
    ok: int
    fixed: int
    unresolved: int


class LabelFixes(BaseModel):
    """``rag-pipeline fix-labels --format json`` (``model_dump(exclude_unset=True)``)."""

    dataset: str
    output: str | None
    knowledge_base: str
    counts: FixCounts
    changes: list[LabelChange]
    unresolved: list[LabelChange]


class StoredLabelFixes(BaseModel):
    """The console's fix labels: the fixes, and the new dataset version when they were saved."""

    fixes: LabelFixes
    saved: UploadResult | None = None
