"""BM25 term statistics of a knowledge base, always those of its *searchable* chunks (docs/design.md §3.3):
``knowledge_base_term_stats.doc_freq``, ``knowledge_bases.chunk_count`` (N) and ``avg_chunk_length``.

Every change of what is searchable runs inside :func:`tracking`, in its transaction: it locks the KB row
(``FOR NO KEY UPDATE``), subtracts the affected documents' searchable chunks before the change, adds them after it
and recomputes N and avgdl (bench/stats_bench.py). Statistics not matching the searchable chunks before the change
(an older version's KB) are rebuilt whole instead (:func:`refresh_term_stats`)."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from rag_pipeline.knowledge_base.queries import term_stats as queries
from rag_pipeline.knowledge_base.queries.term_stats import refresh_term_stats

ANALYZE_FROM = 50
"""A change of this many documents or more refreshes the planner's statistics first (a fraction of a second):
planned on the statistics of the tables before a bulk ingestion, adding its postings took minutes (quadratic in
the documents: 46 s for 5,000 chunks, 600 s for 20,000)."""


@contextmanager
def tracking(conn: sa.Connection, kb_id, document_ids: Collection) -> Iterator[None]:
    """Keep the KB's statistics equal to its searchable chunks across a change of the documents
    ``document_ids`` (other documents must not change in the block); nothing is applied if the block raises."""
    docs = list(dict.fromkeys(document_ids))
    if not docs:
        yield
        return
    consistent = queries.lock_statistics(conn, kb_id)
    if consistent:
        queries.start_delta(conn, kb_id, docs)
    yield
    if len(docs) >= ANALYZE_FROM:
        queries.analyze_searchable_tables(conn)
    if not consistent:
        refresh_term_stats(conn, kb_id)
        return
    if queries.apply_delta(conn, kb_id, docs):  # cannot happen from consistent statistics; never leave a wrong df
        refresh_term_stats(conn, kb_id)
    else:
        queries.update_n_and_avgdl(conn, kb_id)
