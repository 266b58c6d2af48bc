"""The label check (docs/design.md §8) on an attached knowledge base: is every relevant id a chunk of the user's
table that the mapping's document filter lets retrieval return?

A label is the user's chunk id: a UUID chunk id is itself; any other id is the uuid5 a TREC qrels import (or a run
that returned it) derived and remembered (``external_chunk_ids``), read back here."""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from rag_pipeline.contracts.label_check import LabelReport, LabelStatus
from rag_pipeline.knowledge_base.attached import AttachedKnowledgeBase, read_only, user_ids
from rag_pipeline.knowledge_base.queries import attached as attached_queries


def check_attached_labels(conn: sa.Connection, attached: AttachedKnowledgeBase,
                          fields_: Iterable[tuple[str, list]]) -> LabelReport:
    """Classify every ``(case id, relevant ids)`` label; ``conn`` is the project's database (remembered ids)."""
    fields_ = list(fields_)
    pairs = [(cid, str(raw)) for cid, ids in fields_ for raw in ids]
    ids = user_ids(conn, attached, [raw for _, raw in pairs])
    with read_only(attached) as user:
        found = {r.chunk_id: r for r in attached_queries.chunks_by_id(user, attached.names, sorted(set(ids.values())))}
    m, name = attached.mapping, attached.kb.name
    rows = []
    for case_id, raw in pairs:
        row = found.get(ids[raw])
        if row is None:
            status, detail = "unknown_id", (f"no row of {m.chunks_table!r} has {m.chunk_id} = {ids[raw]!r} (attached "
                                            f"knowledge base {name!r}); labels are that column's values")
        elif not row.searchable:
            status, detail = "document_not_ready", (f"chunk of document {row.document_name or row.document_id!r}, "
                                                    "which the mapping's document filter excludes from retrieval")
        else:
            status, detail = "ok", f"searchable chunk of document {row.document_name or row.document_id!r}"
        rows.append(LabelStatus(case_id=case_id, chunk_id=raw, status=status, detail=detail))
    return LabelReport.of_rows(name, (cid for cid, _ in fields_), rows)
