"""BM25 term statistics of a knowledge base, always those of its *searchable* chunks.

The searchable chunks are the current chunks of the documents that are READY, PUBLISHED and not deleted
(:data:`queries.documents.SEARCHABLE_DOCUMENT_SQL`, the rule retrieval filters with), so the same searchable corpus
has the same statistics — and the same BM25 scores — whatever its history:

- ``knowledge_base_term_stats.doc_freq`` = number of searchable chunks containing the lexeme (no row at 0);
- ``knowledge_bases.chunk_count`` = N = number of searchable chunks;
- ``knowledge_bases.avg_chunk_length`` = mean ``token_count`` (sum of the lexemes' term frequencies of the
  tsvector) of the searchable chunks, 0 when there is none.

``chunk_terms`` keeps the postings of every current chunk (searchable or not); retrieval filters the chunks.

Every change of what is searchable (ingestion of new/changed/removed documents, a lifecycle change) runs
inside :func:`tracking`, in the transaction of the change:

- on entry it locks the KB row (``FOR NO KEY UPDATE``: changes of one KB's statistics are serialised, readers
  and foreign-key inserts are not blocked) and subtracts, per lexeme, the searchable chunks of the affected
  documents as they are *before* the change;
- on exit it adds them as they are *after* it, applies the difference to ``doc_freq`` and recomputes N and
  avgdl by one aggregate over the searchable chunks (exact: ``avg`` of integers is a ``numeric``).

The df work is linear in the postings of the affected documents; N/avgdl is one scan of the KB's current chunks.
So a lifecycle change costs a fraction of rebuilding the whole KB's statistics (bench/stats_bench.py). When the
stored statistics are not those of the searchable chunks before the change (a KB written by an older version,
which counted every current chunk),
the df of the whole KB is rebuilt instead (:func:`refresh_term_stats`), so such a KB is healed by its next change.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from rag_pipeline.knowledge_base.queries import term_stats as queries


def refresh_term_stats(conn: sa.Connection, kb_id) -> None:
    """Recompute every statistic of the KB from its searchable chunks (linear in the KB's postings)."""
    queries.rebuild_doc_freqs(conn, kb_id)
    queries.update_n_and_avgdl(conn, kb_id)


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
    # the lock first, in its own statement: the aggregate below must see what committed while we waited for it
    queries.lock_statistics(conn, kb_id)
    consistent = queries.statistics_consistent(conn, kb_id)
    if consistent:
        queries.start_delta(conn)
        queries.add_documents_to_delta(conn, kb_id, docs, -1)
    yield
    if not consistent:
        refresh_term_stats(conn, kb_id)
        return
    queries.add_documents_to_delta(conn, kb_id, docs, 1)
    if queries.apply_delta(conn, kb_id):  # cannot happen from consistent statistics; never leave a wrong df behind
        refresh_term_stats(conn, kb_id)
    else:
        queries.update_n_and_avgdl(conn, kb_id)
