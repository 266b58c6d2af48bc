"""The label draft: pooled candidates of several strategies per question, judged by a person, then a dataset.

``rag-pipeline suggest`` writes a draft, ``rag-pipeline label`` (or the admin console) records the judgments in
it, and :func:`export_cases` turns it into dataset cases. A draft is a JSON object::

    {"format": "rag-pipeline-label-draft", "format_version": 1,
     "knowledge_base": "demo", "name": "my-dataset",            # name: default name of the exported dataset
     "strategies": ["hybrid-v1", "bm25-v1"], "depth": 10,       # how the pools were made
     "strategies_left_out": {"vector-minilm-v1": "strategy ... cannot run ..."},  # default pools: not run, why
     "created_at": "2026-11-30T17:00:00Z", "position": 0,       # position: the question the labeller is on
     "questions": [
       {"case_id": "q-001", "question": "...", "k": 10,
        "status": "pending",                                    # pending | judged | skipped
        "candidates": [                                         # the pool: union of every strategy's top depth
          {"chunk_id": "…uuid…", "document_id": "…", "document_name": "faq.md", "ordinal": 3,
           "char_start": 120, "char_end": 480, "text": "…the chunk's text…",
           "found_by": {"hybrid-v1": 1, "bm25-v1": 4},          # strategy -> rank in its pool ({} = a prior label)
           "grade": null}]}]}                                   # null = not judged; 0 = not relevant; 1-3 relevant

Candidates are ordered by how strongly the strategies agree (sum over strategies of 1 / (60 + rank), then the
best rank, then chunk id). Grades 0-3 are what the labelling keys give (a dataset allows 0-10, so a prior label
keeps its grade). Exported case: the relevant ids as a list (the original design's form) when every judged candidate has
grade 1 (or with ``binary``), else the judged candidates as graded ``{chunk_id: grade}`` (grade 0 = judged not relevant,
kept); unjudged candidates are left out; a question without a relevant candidate, or
skipped, is not exported (listed instead). A question read from a dataset keeps its answer fields
(``reference_answers``, ``answerable``, ``key_points``; docs/design.md §12.1): an unanswerable one is exported with
no relevant chunk (its grade-0 judgments kept unless ``binary``). Nothing here touches the database.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from rag_pipeline.contracts.labelling import FORMAT, Draft
from rag_pipeline.evaluation.datasets.strict_json import JsonReadError, decode_json
from rag_pipeline.storage.files import FileReadError, read_bounded, write_atomic

MAX_DRAFT_BYTES = 200 * 1024 * 1024
KEY_GRADES = (0, 1, 2, 3)  # the grades the labelling keys give
RRF_K = 60


class DraftError(ValueError):
    """A draft file that cannot be read or is not a valid draft; the message names the file and every problem."""


def pool_order(found_by: dict[str, int]) -> tuple[float, int]:
    """Sort key of a pooled candidate (smaller first): agreement of the strategies, then the best rank."""
    return (-sum(1.0 / (RRF_K + r) for r in found_by.values()), min(found_by.values(), default=10**9))


def load_draft(path: str | Path) -> Draft:
    """Read and validate a draft; :class:`DraftError` lists every problem (``questions[2].candidates[0].grade``)."""
    path = Path(path)
    try:
        raw = read_bounded(path, MAX_DRAFT_BYTES, what="draft")
    except FileReadError as exc:
        raise DraftError(f"cannot read the draft {exc}") from None
    try:
        data = decode_json(raw, MAX_DRAFT_BYTES)
    except JsonReadError as exc:
        raise DraftError(f"invalid draft {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DraftError(f"invalid draft {path}: not a label draft (a JSON object with \"format\": \"{FORMAT}\", "
                         "as `rag-pipeline suggest` writes)")
    try:
        draft = Draft.model_validate(_plain(data))
    except ValidationError as exc:
        lines = [f"  {_where(e['loc'])}: {e['msg']}" for e in exc.errors()[:50]]
        raise DraftError(f"invalid draft {path}:\n" + "\n".join(lines)) from None
    problems = [f"  questions[{i}]: case_id {q.case_id!r} is used twice"
                for i, q in enumerate(draft.questions) if [x.case_id for x in draft.questions].index(q.case_id) != i]
    if draft.position >= len(draft.questions):
        problems.append(f"  position: {draft.position} is past the last question ({len(draft.questions) - 1})")
    if problems:
        raise DraftError(f"invalid draft {path}:\n" + "\n".join(problems))
    return draft


def _plain(value):
    """JSON as plain dicts/lists (the decoder's duplicate-key tracking dicts become dicts)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _where(loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def save_draft(draft: Draft, path: str | Path) -> None:
    """Write the draft atomically (a temporary file renamed over it): a crash never leaves half a draft."""
    path = Path(path)
    text = json.dumps(draft.model_dump(), ensure_ascii=False, indent=1) + "\n"
    write_atomic(path, text)


def export_cases(draft: Draft, *, binary: bool = False) -> tuple[list[dict], list[tuple[str, str]]]:
    """``(dataset cases, [(case_id, why not exported)])`` of a draft."""
    cases, left_out = [], []
    for q in draft.questions:
        if q.status == "skipped":
            left_out.append((q.case_id, "skipped"))
            continue
        relevant = q.relevant()
        judged = {c.chunk_id: c.grade for c in q.candidates if c.grade is not None}
        if not q.answerable:  # unanswerable: exported with no relevant chunk (docs/design.md §12.1)
            if relevant:
                left_out.append((q.case_id, "marked unanswerable but a candidate is judged relevant: judge it 0 "
                                            "or drop \"answerable\": false"))
                continue
            cases.append({"case_id": q.case_id, "question": q.question,
                          "relevant_chunk_ids": [] if binary or not judged else judged, "k": q.k,
                          **q.answer_fields()})
            continue
        if not relevant:
            why = "not judged yet" if q.status == "pending" and all(c.grade is None for c in q.candidates) else \
                "no candidate judged relevant (find its answer with `rag-pipeline chunks --search`)"
            left_out.append((q.case_id, why))
            continue
        if binary or set(judged.values()) == {1}:
            labels: list[str] | dict[str, int] = [c.chunk_id for c in relevant]
        else:
            labels = judged
        cases.append({"case_id": q.case_id, "question": q.question, "relevant_chunk_ids": labels, "k": q.k,
                      **q.answer_fields()})
    return cases, left_out
