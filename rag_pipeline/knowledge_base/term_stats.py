"""BM25 term statistics of a knowledge base, always those of its *searchable* chunks (docs/design.md §3.3), so the
same searchable corpus has the same statistics, and the same BM25 scores, whatever its history:
``knowledge_base_term_stats.doc_freq`` (no row at 0), ``knowledge_bases.chunk_count`` (N) and ``avg_chunk_length``
(mean ``token_count``, 0 without chunks). ``chunk_terms`` keeps the postings of every current chunk.

Every change of what is searchable (ingestion, a lifecycle change) runs inside :func:`tracking`, in the
transaction of the change: on entry it locks the KB row (``FOR NO KEY UPDATE``: changes of one KB's statistics
are serialised, readers and foreign-key inserts are not blocked) and subtracts, per lexeme, the searchable
chunks of the affected documents as they are *before* the change; on exit it adds them as they are *after* it,
applies the difference to ``doc_freq`` and recomputes N and avgdl by one aggregate over the searchable chunks.
So a lifecycle change costs a fraction of rebuilding the whole KB's statistics (bench/stats_bench.py). When the
stored statistics are not those of the searchable chunks before the change (a KB written by an older version),
the whole KB's are rebuilt instead (:func:`refresh_term_stats`), so such a KB is healed by its next change.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from rag_pipeline.knowledge_base.queries import term_stats as queries
from rag_pipeline.knowledge_base.queries.term_stats import refresh_term_stats


@contextmanager
def tracking(conn: sa.Connection, kb_id, document_ids: Collection) -> Iterator[None]:
    """Keep the KB's statistics equal to its searchable chunks across a change of the documents ``document_ids``.

    Everything the block changes about those documents and their chunks (status, publication, deleted, chunks
    inserted, retired or revived, postings) is reflected on exit; other documents must not change in the block.
    If the block raises, nothing is applied (the caller's transaction is rolled back).
    """
    docs = list(dict.fromkeys(document_ids))
    if not docs:
        yield
        return
    consistent = queries.lock_statistics(conn, kb_id)
    if consistent:
        queries.start_delta(conn, kb_id, docs)
    yield
    if not consistent:
        refresh_term_stats(conn, kb_id)
        return
    if queries.apply_delta(conn, kb_id, docs):  # cannot happen from consistent statistics; never leave a wrong df
        refresh_term_stats(conn, kb_id)
    else:
        queries.update_n_and_avgdl(conn, kb_id)
