"""Several annotators' judgments of a case (docs/labelling.md, "Several annotators"): the rule that turns them into
the case's labels, and the checks across them that no single value shows."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import TypeAdapter, ValidationError

from rag_pipeline.contracts.dataset import RELEVANT_GRADE, CaseJudgment

RULES = ("adjudicated", "unanimous", "majority", "tie_lower")
"""How a chunk's label was decided, in the order the rule tries them."""
_JUDGMENT = TypeAdapter(CaseJudgment)


@dataclass(frozen=True)
class Judgment:
    """A validated judgment, its chunk id lower-cased and stripped as every label is."""

    annotator: str
    chunk_id: str
    grade: int
    adjudicated: bool = False

    def as_dict(self) -> dict:
        data: dict = {"annotator": self.annotator, "chunk_id": self.chunk_id, "grade": self.grade}
        return data | ({"adjudicated": True} if self.adjudicated else {})


@dataclass(frozen=True)
class Resolution:
    """A chunk's label: its grade and the rule that gave it (one of :data:`RULES`)."""

    grade: int
    rule: str


def judgments_of(values: Iterable[CaseJudgment]) -> tuple[Judgment, ...]:
    return tuple(Judgment(j.annotator.strip(), j.chunk_id.strip().lower(), j.grade, j.adjudicated) for j in values)


def resolve_chunk(judged: Sequence[Judgment]) -> Resolution:
    """The label of one chunk from its judgments: the adjudicated grade, else the grade every annotator gave,
    else the grade most of them gave, else (a tie) the lowest of the tied grades: a disputed chunk is not claimed
    more relevant than the most cautious of its most common readings, and it is listed for adjudication."""
    settled = [j.grade for j in judged if j.adjudicated]
    if settled:
        return Resolution(settled[0], "adjudicated")
    counts = Counter(j.grade for j in judged)
    if len(counts) == 1:
        return Resolution(judged[0].grade, "unanimous")
    top = max(counts.values())
    tied = sorted(g for g, n in counts.items() if n == top)
    return Resolution(tied[0], "majority" if len(tied) == 1 else "tie_lower")


def resolve(judgments: Iterable[Judgment]) -> dict[str, Resolution]:
    """Every judged chunk's :class:`Resolution`, by chunk id."""
    by_chunk: dict[str, list[Judgment]] = defaultdict(list)
    for j in judgments:
        by_chunk[j.chunk_id].append(j)
    return {chunk: resolve_chunk(judged) for chunk, judged in sorted(by_chunk.items())}


def resolved_labels(judgments: Iterable[Judgment]) -> dict[str, int]:
    """``{chunk_id: grade}`` of the resolution: what ``relevant_chunk_ids`` must hold (graded form)."""
    return {chunk: r.grade for chunk, r in resolve(judgments).items()}


def _labels_differ(value: object, labels: dict[str, int]) -> bool:
    if isinstance(value, list):
        return sorted(i.strip().lower() for i in value) != sorted(c for c, g in labels.items() if g >= RELEVANT_GRADE)
    if isinstance(value, dict):
        return {k.strip().lower(): g for k, g in value.items()} != labels
    return False


def judgment_problems(item: dict, annotators: Sequence[str] | None,
                      relevant_ok: bool) -> list[tuple[tuple, str, str]]:
    """``(order, field, message)`` of the rules across a case's valid judgments (the invalid ones are pydantic's
    to report): an annotator not declared, one annotator judging a chunk twice, two adjudicated grades of a
    chunk, and ``relevant_chunk_ids`` (when ``relevant_ok``) that is not their resolution."""
    valid: list[tuple[int, Judgment]] = []
    for i, value in enumerate(item["judgments"]):
        try:
            valid += [(i, judgments_of([_JUDGMENT.validate_python(value)])[0])]
        except ValidationError:
            relevant_ok = False
    found: list[tuple[tuple, str, str]] = []
    known = {a.strip() for a in annotators or ()}
    first: dict[tuple[str, str], int] = {}
    adjudicated: dict[str, int] = {}
    judged = [j for _, j in valid]
    for i, j in valid:
        if annotators is None:
            found.append(((i, 0), f"judgments[{i}].annotator", "the file declares no top-level \"annotators\"; "
                          "list everyone who judges there (a file with judgments uses the object form)"))
        elif j.annotator not in known:
            found.append(((i, 0), f"judgments[{i}].annotator", f"unknown annotator {j.annotator!r}; the file's "
                          f"annotators are {sorted(known)}"))
        if (j.annotator, j.chunk_id) in first:
            found.append(((i, 1), f"judgments[{i}]", f"duplicate judgment: {j.annotator!r} already judged chunk "
                          f"{j.chunk_id} in judgments[{first[j.annotator, j.chunk_id]}] (one grade per annotator "
                          "and chunk)"))
        first.setdefault((j.annotator, j.chunk_id), i)
        if j.adjudicated:
            if j.chunk_id in adjudicated:
                found.append(((i, 2), f"judgments[{i}].adjudicated", f"chunk {j.chunk_id} was already "
                              f"adjudicated in judgments[{adjudicated[j.chunk_id]}] (one adjudicated grade per "
                              "chunk)"))
            adjudicated.setdefault(j.chunk_id, i)
    if not found and relevant_ok and _labels_differ(item.get("relevant_chunk_ids"), labels := resolved_labels(judged)):
        shown = json.dumps(labels, separators=(", ", ": "))
        found.append(((-1,), "relevant_chunk_ids", "is not the resolution of the case's judgments (adjudicated, "
                      "else unanimous, else majority, else the lower tied grade: docs/labelling.md); it must be "
                      f"{shown if len(shown) <= 400 else shown[:400] + '…'} (`rag-pipeline agreement FILE "
                      "--resolved OUT` writes the file with it)"))
    return found


def with_resolved_labels(data: object) -> object:
    """A decoded dataset document whose judged cases get ``relevant_chunk_ids`` = the resolution of their valid
    judgments (the graded object form; the list form kept when every label is 0 or 1 and the case used it):
    ``rag-pipeline agreement --resolved``. Anything else is left as it is, for the validator to judge."""
    for case in (data.get("cases") if isinstance(data, dict) else None) or ():
        if not isinstance(case, dict) or not isinstance(case.get("judgments"), list):
            continue
        valid: list[Judgment] = []
        for value in case["judgments"]:
            try:
                valid += judgments_of([_JUDGMENT.validate_python(value)])
            except ValidationError:
                continue
        labels = resolved_labels(valid)
        if isinstance(case.get("relevant_chunk_ids"), list) and all(g <= RELEVANT_GRADE for g in labels.values()):
            case["relevant_chunk_ids"] = [c for c, g in labels.items() if g >= RELEVANT_GRADE]
        else:
            case["relevant_chunk_ids"] = labels
    return data
