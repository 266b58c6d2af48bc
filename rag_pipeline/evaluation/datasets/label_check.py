"""Label integrity (docs/design.md §8): is every relevant id of every case a searchable chunk of the knowledge
base? One label status (contracts.label_check.STATUSES: the first that applies) per label, three statements per
dataset."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import sqlalchemy as sa

from rag_pipeline.contracts.label_check import LabelReport, LabelStatus
from rag_pipeline.evaluation.datasets.load import relevant_ids_of
from rag_pipeline.evaluation.queries import knowledge_base as kb_queries
from rag_pipeline.knowledge_base.attached import load as load_attached
from rag_pipeline.knowledge_base.lifecycle import (
    SEARCHABLE_PUBLICATION,
    SEARCHABLE_STATUS,
    KnowledgeBaseRef,
    resolve_knowledge_base,
)
from rag_pipeline.storage.ids import as_uuid

if TYPE_CHECKING:
    from rag_pipeline.evaluation.datasets.load import Dataset

_MAX_LISTED = 8


def _case_fields(case) -> tuple[str, list]:
    """Case id and the ids that count as relevant (grade >= 1; grade-0 judgments are not checked)."""
    if isinstance(case, Mapping):
        return str(case["case_id"]), relevant_ids_of(case["relevant_chunk_ids"])
    return str(case.case_id), list(case.relevant_chunk_ids)


def _listed(ids: Iterable[str]) -> str:
    ids = list(ids)
    more = f" … (+{len(ids) - _MAX_LISTED} more)" if len(ids) > _MAX_LISTED else ""
    return ", ".join(ids[:_MAX_LISTED]) + more


def _chunk_status(row, kb) -> tuple[str, str, tuple[str, ...]]:
    doc = f"document {row.original_name!r}"
    if row.knowledge_base_id != kb.id:
        return ("other_knowledge_base", f"chunk of {doc} in knowledge base {row.kb_name!r}, not {kb.name!r}; "
                "label chunks of the evaluated knowledge base (or evaluate against that one)", ())
    fix = f"rag-pipeline doc {row.original_name!r} --knowledge-base {kb.name!r}"
    problems = []
    if row.is_deleted:
        problems.append(("document_deleted", f"{doc} is deleted, so none of its chunks can be retrieved "
                         f"(restore it: {fix} --deleted undelete, or label another document)"))
    if row.publication_status != SEARCHABLE_PUBLICATION:
        problems.append(("document_unpublished", f"{doc} is {row.publication_status}; only {SEARCHABLE_PUBLICATION} "
                         f"documents are searchable ({fix} --publication {SEARCHABLE_PUBLICATION})"))
    if row.status != SEARCHABLE_STATUS:
        problems.append(("document_not_ready", f"{doc} has status {row.status}; only {SEARCHABLE_STATUS} documents "
                         f"are searchable (finish its ingestion, or {fix} --status {SEARCHABLE_STATUS})"))
    replacements = tuple(row.replacements or ())
    if not row.is_current:
        span = f"chars {row.char_start}-{row.char_end}"
        new = (f"current chunk(s) of the same span: {_listed(replacements)}" if replacements
               else "no current chunk overlaps that span (the passage was removed)")
        problems.append(("chunk_replaced", f"chunk of {doc} replaced by re-ingestion ({span}); {new}"))
    if not problems:
        return "ok", f"current chunk of {doc}", ()
    status, detail = problems[0]
    if len(problems) > 1:
        detail += "; also: " + "; ".join(d for _, d in problems[1:])
    return status, detail, replacements


def check_labels(conn: sa.Connection, knowledge_base: str | KnowledgeBaseRef | sa.Row, cases: Iterable) -> LabelReport:
    """Classify every relevant id of ``cases`` (EvaluationCase objects or case dicts) against ``knowledge_base``
    (a name, a UUID, or resolved)."""
    kb = resolve_knowledge_base(conn, knowledge_base) if isinstance(knowledge_base, str) else knowledge_base
    fields_ = [_case_fields(c) for c in cases]
    if isinstance(kb, KnowledgeBaseRef) and kb.kind == "attached":
        from rag_pipeline.evaluation.datasets.attached_labels import check_attached_labels  # noqa: PLC0415

        attached = load_attached(conn, kb)
        assert attached is not None
        return check_attached_labels(conn, attached, fields_)
    if isinstance(kb, KnowledgeBaseRef) and kb.kind == "external":
        from rag_pipeline.evaluation.datasets.catalogue_labels import check_catalogue_labels  # noqa: PLC0415

        return check_catalogue_labels(conn, kb, fields_)
    pairs = [(cid, str(raw)) for cid, ids in fields_ for raw in ids]
    parsed = {raw: as_uuid(raw) for _, raw in pairs}
    ids = sorted({u for u in parsed.values() if u is not None})
    chunks = kb_queries.label_chunks(conn, ids) if ids else {}
    rest = [u for u in ids if u not in chunks]
    others = kb_queries.documents_and_knowledge_bases(conn, rest) if rest else {}

    rows: list[LabelStatus] = []
    for case_id, raw in pairs:
        u = parsed[raw]
        suggested: tuple[str, ...] = ()
        if u is None:
            status, detail = "not_a_uuid", (f"{raw!r} is not a UUID; relevant ids must be document_chunks.id "
                                            "values such as 30465673-88ea-41f0-a5a0-da496592f3df")
        elif u in chunks:
            status, detail, suggested = _chunk_status(chunks[u], kb)
        elif u in others and others[u].kind == "document":
            o = others[u]
            suggested = tuple(o.chunk_ids or ())
            where = "" if o.kb_name == kb.name else f" in another knowledge base, {o.kb_name!r}"
            status = "is_document_id"
            detail = (f"this is the id of document {o.original_name!r}{where}, not a chunk id (evaluation is "
                      f"chunk-level); its {len(suggested)} current chunk(s): {_listed(suggested) or '(none)'} "
                      "— label the chunk(s) that answer the question")
        elif u in others:
            status = "is_knowledge_base_id"
            detail = f"this is the id of knowledge base {others[u].kb_name!r}, not a chunk id"
        else:
            status = "unknown_id"
            detail = (f"no chunk, document or knowledge base has this id; labels must be document_chunks.id of "
                      f"knowledge base {kb.name!r} (ingested with the same names and chunking)")
        rows.append(LabelStatus(case_id=case_id, chunk_id=raw, status=status, detail=detail,
                                suggested_chunk_ids=suggested))

    return LabelReport.of_rows(kb.name, (cid for cid, _ in fields_), rows)


def relevant_ids_missing(conn: sa.Connection, kb_id, dataset: Dataset) -> int:
    """How many distinct relevant chunk ids of ``dataset`` are not chunks of the knowledge base (current or not)."""
    ids = sorted({i for c in dataset.cases for i in c.relevant_chunk_ids})
    kb = resolve_knowledge_base(conn, kb_id)
    if kb.kind in ("attached", "external"):
        report = check_labels(conn, kb, [{"case_id": "", "relevant_chunk_ids": ids}])
        return sum(r.status == "unknown_id" for r in report.rows)
    return kb_queries.count_not_chunks_of(conn, kb_id, ids)
