"""The label check (docs/design.md §8) on an external knowledge base: is every relevant id a chunk of its
catalogue (``rag-pipeline kb catalogue``, or the texts an HTTP retriever returned)?

A label is the chunk UUID a run stores (a canonical UUID is itself, any other id its uuid5); a label that is no UUID
is read as the external system's own id and mapped the same way."""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from rag_pipeline.contracts.label_check import LabelReport, LabelStatus
from rag_pipeline.evaluation.queries import trec as trec_queries
from rag_pipeline.knowledge_base import catalogue
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseRef
from rag_pipeline.storage.ids import as_uuid, external_chunk_uuid


def label_chunk_id(kb_name: str, raw: str) -> str:
    """The chunk UUID a label names: itself when it is a UUID, else the uuid5 of the external id."""
    u = as_uuid(raw)
    return str(u) if u is not None else str(external_chunk_uuid(kb_name, raw)[0])


def check_catalogue_labels(conn: sa.Connection, kb: KnowledgeBaseRef,
                           fields_: Iterable[tuple[str, list]]) -> LabelReport:
    """Classify every ``(case id, relevant ids)`` label against the catalogue of ``kb``."""
    fields_ = list(fields_)
    pairs = [(cid, str(raw)) for cid, ids in fields_ for raw in ids]
    chunk_of = {raw: label_chunk_id(kb.name, raw) for _, raw in pairs}
    found = catalogue.chunk_rows(conn, kb, sorted(set(chunk_of.values())))
    missing = sorted({c for c in chunk_of.values() if c not in found})
    remembered = trec_queries.external_ids(conn, kb.id, missing)
    size = catalogue.count(conn, kb) if missing else 0
    rows = []
    for case_id, raw in pairs:
        chunk = chunk_of[raw]
        row = found.get(chunk)
        if row is not None:
            status, detail = "ok", f"catalogued document {row.document_name!r}"
        else:
            known = f" (id {remembered[chunk]!r})" if chunk in remembered and remembered[chunk] != raw else ""
            status, detail = "unknown_id", (
                f"not in the chunk catalogue of external knowledge base {kb.name!r}{known}: {size} catalogued "
                f"chunk(s); catalogue your documents with rag-pipeline kb catalogue {kb.name} --corpus FILE")
        rows.append(LabelStatus(case_id=case_id, chunk_id=raw, status=status, detail=detail))
    return LabelReport.of_rows(kb.name, (cid for cid, _ in fields_), rows)
