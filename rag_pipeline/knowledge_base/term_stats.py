"""BM25 term statistics of a knowledge base, kept in step with its current chunks at ingestion.

``knowledge_base_term_stats.doc_freq`` = number of current chunks containing the lexeme;
``knowledge_bases.chunk_count`` = N and ``avg_chunk_length`` = mean ``token_count`` (sum of lexeme
term frequencies of the tsvector), the quantities BM25's IDF and length normalisation need.
"""

from __future__ import annotations

import sqlalchemy as sa


def refresh_term_stats(conn: sa.Connection, kb_id) -> None:
    conn.execute(sa.text("DELETE FROM knowledge_base_term_stats WHERE knowledge_base_id = :kb"), {"kb": kb_id})
    conn.execute(sa.text(
        "INSERT INTO knowledge_base_term_stats (knowledge_base_id, lexeme, doc_freq) "
        "SELECT knowledge_base_id, lexeme, count(*) FROM chunk_terms WHERE knowledge_base_id = :kb "
        "GROUP BY knowledge_base_id, lexeme"
    ), {"kb": kb_id})
    conn.execute(sa.text(
        "UPDATE knowledge_bases k SET chunk_count = s.n, avg_chunk_length = s.avg_len FROM ("
        "  SELECT count(*) AS n, coalesce(avg(token_count), 0) AS avg_len FROM document_chunks"
        "  WHERE knowledge_base_id = :kb AND is_current) s WHERE k.id = :kb"
    ), {"kb": kb_id})
