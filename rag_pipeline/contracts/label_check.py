"""The label check of a dataset against a knowledge base (docs/design.md §8): one status per relevant id, the
report with its per-case verdicts, and a dataset file's check."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from pydantic import BaseModel, Field

STATUSES = ("ok", "not_a_uuid", "unknown_id", "is_document_id", "is_knowledge_base_id", "other_knowledge_base",
            "document_deleted", "document_unpublished", "document_not_ready", "chunk_replaced")


class LabelStatus(BaseModel):
    """One relevant id of one case (a row of ``check-dataset --format json``). ``suggested_chunk_ids`` = chunks a
    user may label instead (not in the dump)."""

    case_id: str
    chunk_id: str
    status: str = Field(description="One of STATUSES.")
    detail: str
    suggested_chunk_ids: tuple[str, ...] = Field(default=(), exclude=True)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


LABELS_COUNTED = "labels: the relevant chunks, grade >= 1"
"""What :meth:`LabelReport.summary` counts (``fix-labels`` counts every judged chunk, grade 0 included)."""


class LabelReport(BaseModel):
    knowledge_base: str
    rows: list[LabelStatus]
    verdicts: dict[str, str] = Field(default_factory=dict, description="case_id -> ok | some_invalid | all_invalid")

    @classmethod
    def of_rows(cls, knowledge_base: str, case_ids: Iterable[str], rows: list[LabelStatus]) -> LabelReport:
        """The report of ``rows``, each case's verdict from its rows (a case without labels is ``ok``)."""
        by_case: dict[str, list[bool]] = {cid: [] for cid in case_ids}
        for r in rows:
            by_case[r.case_id].append(r.ok)
        verdicts = {cid: "ok" if all(oks) else ("all_invalid" if not any(oks) else "some_invalid")
                    for cid, oks in by_case.items()}
        return cls(knowledge_base=knowledge_base, rows=rows, verdicts=verdicts)

    def counts(self) -> dict[str, int]:
        """Labels per status, in :data:`STATUSES` order, zero counts left out."""
        c = Counter(r.status for r in self.rows)
        return {s: c[s] for s in STATUSES if c[s]}

    def invalid(self) -> list[LabelStatus]:
        return [r for r in self.rows if not r.ok]

    def cases_with(self, verdict: str) -> list[str]:
        return [case for case, v in self.verdicts.items() if v == verdict]

    def status_map(self) -> dict[tuple[str, str], str]:
        """``{(case_id, chunk_id): status}``: what
        :func:`rag_pipeline.evaluation.diagnosis.miss_reasons.classify_misses` takes."""
        return {(r.case_id, r.chunk_id): r.status for r in self.rows}

    def summary(self) -> str:
        bad = self.invalid()
        if not bad:
            return (f"all {len(self.rows)} labels of {len(self.verdicts)} cases are valid chunks of "
                    f"{self.knowledge_base!r} ({LABELS_COUNTED})")
        parts = ", ".join(f"{n} {s}" for s, n in self.counts().items() if s != "ok")
        return (f"{len(bad)} of {len(self.rows)} labels are invalid ({parts}); "
                f"{len(self.cases_with('all_invalid'))} of {len(self.verdicts)} cases have no valid label "
                f"and can only score 0 ({LABELS_COUNTED})")


class DatasetCheck(BaseModel):
    """The label report of a dataset file; ``note`` when the file was read leniently (malformed ids)."""

    report: LabelReport
    note: str | None = None
