"""The label draft: pooled candidates of several strategies per question, judged by a person (its format and
behaviour: :mod:`rag_pipeline.service.labelling.draft_files`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rag_pipeline.contracts.dataset import MAX_GRADE, MAX_K

FORMAT = "rag-pipeline-label-draft"
FORMAT_VERSION = 1
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

    def relevant(self) -> list[DraftCandidate]:
        return [c for c in self.candidates if (c.grade or 0) >= 1]


class Draft(_Strict):
    format: Literal["rag-pipeline-label-draft"] = FORMAT
    format_version: Literal[1] = FORMAT_VERSION
    knowledge_base: str = Field(min_length=1)
    name: str | None = None
    strategies: list[str]
    depth: int = Field(ge=1)
    created_at: str
    position: int = Field(0, ge=0)
    questions: list[DraftQuestion] = Field(min_length=1)

    def progress(self) -> dict[str, int]:
        """Questions per status."""
        return {s: sum(q.status == s for q in self.questions) for s in STATUSES}
