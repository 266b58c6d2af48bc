"""``fix-labels``: apply the label fixes ``check-dataset`` proposes where they are unambiguous, list the rest.

Every judged id of every case (grade-0 judgments included) is classified by
:func:`rag_pipeline.evaluation.datasets.label_check.check_labels` against the target knowledge base, then:

- ``ok`` → kept;
- ``is_document_id`` → replaced by that document's chunk when the document (of that name, in the target knowledge
  base) has exactly one searchable chunk; else listed with its chunks;
- ``chunk_replaced``, ``other_knowledge_base`` and ``unknown_id`` → re-mapped by document span
  (:mod:`rag_pipeline.knowledge_base.span_remap`): automatic only when exactly one current chunk covers >= 50 % of
  the old chunk's span, else listed with the candidates and their overlap fractions;
- any other status (a deleted/unpublished/not ready document, a knowledge base id) → listed with the check's fix.

A label that is not fixed stays as it was, so the output is a complete dataset a person finishes by hand. Every
change (case, old id, new ids, reason, overlap) and every listed label are in the result and in the output file's
``metadata.label_fixes``, with the source dataset's name, version and knowledge base: whoever compares runs across
chunkings can see that labels were re-mapped. A re-mapped label keeps its grade; two labels landing on one chunk
keep the higher grade."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import sqlalchemy as sa

from rag_pipeline.contracts.dataset import MAX_METADATA_BYTES
from rag_pipeline.contracts.labelling import FixCandidate, FixCounts, LabelChange, LabelFixes, StoredLabelFixes
from rag_pipeline.evaluation.datasets.judgments import Judgment, resolved_labels
from rag_pipeline.evaluation.datasets.label_check import check_labels
from rag_pipeline.evaluation.datasets.load import Dataset, DatasetError, load_dataset, parse_dataset
from rag_pipeline.evaluation.datasets.queries import source_path
from rag_pipeline.evaluation.datasets.resolve import DatasetNotFoundError
from rag_pipeline.evaluation.runs.results import load_stored_dataset
from rag_pipeline.knowledge_base import chunk_lookup, span_remap
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.service import stored_datasets
from rag_pipeline.storage.files import write_atomic

REMAPPED_STATUSES = ("chunk_replaced", "other_knowledge_base", "unknown_id")


def _load(path: Path, knowledge_base: str) -> Dataset:
    """The dataset as written (its own knowledge base, if it names one; else the target)."""
    try:
        return load_dataset(path)
    except DatasetError as exc:
        if exc.problems and all(p.field == "knowledge_base" for p in exc.problems):
            return load_dataset(path, knowledge_base=knowledge_base)
        raise


def fix_labels(engine: sa.Engine, dataset_path: str | Path, knowledge_base: str, output: str | Path) -> LabelFixes:
    """Write ``output``: the dataset with its labels fixed for ``knowledge_base`` (see the module docstring)."""
    path, output = Path(dataset_path), Path(output)
    if output.is_dir():
        raise OSError(f"--output {output} is a directory; give a file name")
    if output.exists() and output.resolve() == path.resolve():
        raise OSError(f"--output {output} is the dataset itself; write the fixed dataset to another file")
    fixes, text = _fix_dataset(engine, _load(path, knowledge_base), knowledge_base, output=output)
    write_atomic(output, text, parents=True)
    return fixes


def _fix_dataset(engine: sa.Engine, dataset: Dataset, knowledge_base: str, *,
                output: Path | None = None) -> tuple[LabelFixes, str]:
    """The fixes for ``dataset``'s labels on ``knowledge_base`` and the fixed dataset as JSON; writes nothing."""
    judged = [SimpleNamespace(case_id=c.case_id, relevant_chunk_ids=list(c.grades)) for c in dataset.cases]
    with engine.begin() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
        report = check_labels(conn, kb, judged)
        remaps = span_remap.remap_by_span(conn, kb.id, sorted({r.chunk_id for r in report.rows
                                                               if r.status in REMAPPED_STATUSES}))
        documents = {r.chunk_id: chunk_lookup.document_chunks_for(conn, r.chunk_id, kb.id)
                     for r in report.rows if r.status == "is_document_id"}
    new_ids: dict[tuple[str, str], list[str]] = {}
    changes, unresolved = [], []
    for row in report.rows:
        if row.ok:
            continue
        change = _fix(row, remaps.get(row.chunk_id), documents.get(row.chunk_id))
        if change.new_chunk_ids:
            new_ids[(row.case_id, row.chunk_id)] = change.new_chunk_ids
            changes.append(change)
        else:
            unresolved.append(change)
    counts = FixCounts(labels=len(report.rows), ok=len(report.rows) - len(changes) - len(unresolved),
                       fixed=len(changes), unresolved=len(unresolved))
    fixes = LabelFixes(dataset=dataset.name, output=str(output) if output else None, knowledge_base=kb.name,
                       counts=counts, changes=changes, unresolved=unresolved)
    cases = [_fixed_case(c, new_ids) for c in dataset.cases]
    data = _output(dataset, kb.name, cases, fixes)
    text = json.dumps(data, ensure_ascii=False, indent=1) + "\n"
    parse_dataset(text, source=str(output or f"fixed labels of {dataset.name}"),
                  default_name=output.stem if output else dataset.name)  # a valid dataset, or nothing is written
    return fixes, text


def fix_stored_labels(engine: sa.Engine, dataset_id: str, knowledge_base: str, *,
                      save: bool = False) -> StoredLabelFixes:
    """Fix a stored dataset version's labels: a preview, or with ``save`` a new version recording each change."""
    with engine.connect() as conn:
        try:
            dataset = load_stored_dataset(conn, dataset_id)
        except LookupError as exc:
            raise DatasetNotFoundError(str(exc)) from None
    fixes, text = _fix_dataset(engine, dataset, knowledge_base)
    if not save or not fixes.changes:
        return StoredLabelFixes(fixes=fixes)
    saved = stored_datasets.store_uploaded_dataset(engine, knowledge_base, text,
                                                   source=f"fix-labels of {dataset.name}", name=dataset.name)
    return StoredLabelFixes(fixes=fixes, saved=saved)


def _fix(row, remap: span_remap.SpanRemap | None, document: tuple | None) -> LabelChange:
    base = {"case_id": row.case_id, "old_chunk_id": row.chunk_id, "status": row.status}
    if row.status == "is_document_id":
        name, chunks = document or (None, [])
        listed = [FixCandidate(chunk_id=c.chunk_id, ordinal=c.ordinal, char_start=c.char_start, char_end=c.char_end)
                  for c in chunks]
        if len(chunks) == 1:
            return LabelChange(**base, new_chunk_ids=[chunks[0].chunk_id], overlap=None,
                               reason=f"a document id: document {name!r} has exactly one chunk")
        why = (f"a document id: document {name!r} has {len(chunks)} searchable chunks here; label the one(s) that "
               "answer" if name else row.detail)
        return LabelChange(**base, new_chunk_ids=[], reason=why, candidates=listed)
    if row.status in REMAPPED_STATUSES and remap is not None:
        new_id, reason = span_remap.decide(remap)
        candidates = [FixCandidate(**c.as_dict(), document_name=remap.document_name) for c in remap.candidates]
        old_span = [remap.old.char_start, remap.old.char_end] if remap.old else None
        if new_id:
            overlap = next(c.overlap for c in remap.candidates if c.chunk_id == new_id)
            return LabelChange(**base, new_chunk_ids=[new_id], overlap={new_id: round(overlap, 4)}, reason=reason,
                               document_name=remap.document_name, old_span=old_span)
        return LabelChange(**base, new_chunk_ids=[], reason=reason, document_name=remap.document_name,
                           old_span=old_span, candidates=candidates)
    return LabelChange(**base, new_chunk_ids=[], reason=row.detail, candidates=[
        FixCandidate(chunk_id=c) for c in row.suggested_chunk_ids])


def _fixed_judgments(case, new_ids: dict[tuple[str, str], list[str]]) -> list[Judgment]:
    """The case's annotator judgments with their chunk ids re-mapped as its labels are (one annotator's grades
    of chunks that became one: the highest, as for the labels)."""
    merged: dict[tuple[str, str, bool], int] = {}
    for j in case.annotator_judgments:
        for new in new_ids.get((case.case_id, j.chunk_id), [j.chunk_id]):
            key = (j.annotator, new, j.adjudicated)
            merged[key] = max(j.grade, merged.get(key, j.grade))
    return [Judgment(a, cid, grade, adjudicated) for (a, cid, adjudicated), grade in merged.items()]


def _fixed_case(case, new_ids: dict[tuple[str, str], list[str]]) -> dict:
    grades: dict[str, int] = {}
    for cid, grade in case.grades.items():
        for new in new_ids.get((case.case_id, cid), [cid]):
            grades[new] = max(grade, grades.get(new, grade))
    if case.annotator_judgments:  # the labels stay the rule's labels of the re-mapped judgments
        judgments = _fixed_judgments(case, new_ids)
        grades = resolved_labels(judgments) if case.is_graded else {
            c: g for c, g in resolved_labels(judgments).items() if g >= 1}
        return {**case.as_dict(), "relevant_chunk_ids": grades if case.is_graded else list(grades),
                "judgments": [j.as_dict() for j in judgments]}
    if case.is_graded:
        labels: list[str] | dict[str, int] = grades
    else:
        labels = list(grades)
    return {**case.as_dict(), "relevant_chunk_ids": labels}  # the answer fields kept (docs/design.md §12.1)


def _output(dataset: Dataset, kb_name: str, cases: list[dict], fixes: LabelFixes) -> dict:
    record = {"from": {"dataset": dataset.name, "version": dataset.content_hash,
                       "knowledge_base": dataset.knowledge_base},
              "knowledge_base": kb_name, "fixed_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "rule": f"re-mapped by document span only when one current chunk covers >= "
                      f"{span_remap.AUTO_OVERLAP:.0%} of the old span; everything else listed, unchanged",
              **fixes.model_dump(include={"counts", "changes", "unresolved"}, exclude_unset=True)}
    metadata = {**(dataset.metadata or {}), "label_fixes": record}
    # the metadata limit (1 MB): drop the per-label lists from the end, saying how many were left out
    while len(json.dumps(metadata, ensure_ascii=False).encode()) > MAX_METADATA_BYTES - 1024:
        for key in ("unresolved", "changes"):
            if record[key]:
                record[key] = record[key][: len(record[key]) // 2]
                record[f"{key}_truncated"] = True
        if not record["changes"] and not record["unresolved"]:
            break
    data: dict = {"knowledge_base": kb_name}
    annotators = sorted({j["annotator"] for c in cases for j in c.get("judgments", ())})
    if annotators:
        data["annotators"] = annotators
    if dataset.description:
        data["description"] = dataset.description
    return {**data, "metadata": metadata, "cases": cases}


def remap_note(conn: sa.Connection, dataset: str, knowledge_base: str, content_hash: str) -> str | None:
    """A line for a comparison of this dataset version when its labels were re-mapped by ``fix-labels`` (read from
    the ``metadata.label_fixes`` of the file the version was stored from, if that file still holds that version)."""
    path = source_path(conn, dataset, knowledge_base, content_hash)
    if not path:
        return None
    try:
        stored = load_dataset(path)
    except (DatasetError, OSError):
        return None
    record = (stored.metadata or {}).get("label_fixes") if stored.content_hash == content_hash else None
    if not isinstance(record, dict):
        return None
    source, counts = record.get("from") or {}, record.get("counts") or {}
    return (f"labels re-mapped by fix-labels from dataset {source.get('dataset')!r} version "
            f"{str(source.get('version'))[:12]} (knowledge base {source.get('knowledge_base')!r}) to knowledge base "
            f"{record.get('knowledge_base')!r}: {counts.get('fixed', 0)} fixed (by document span or a document's "
            f"only chunk), {counts.get('unresolved', 0)} left as they were; compare with runs of the source "
            "dataset knowing the labels differ (details: metadata.label_fixes of " + str(path) + ")")
