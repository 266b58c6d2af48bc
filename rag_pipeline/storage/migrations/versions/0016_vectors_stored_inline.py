"""the vectors are stored in their rows, not in the TOAST table

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05

``chunk_embeddings`` gets ``toast_tuple_target = 8160`` (the most a row may take in a page). With the default
(2 KB), a vector of more than about 500 dimensions went out of line into the TOAST table, and every read of it (the
score of each row the HNSW index returns, every vector of an exact scan, the load of the in-memory exact leg)
looked it up there in two pieces: 16 questions of the SQL exact leg over 100,000 vectors of 512 dimensions took
7.4 s, inline 1.7 s. pgvector's ``EXTERNAL`` storage stays (never compressed); only a vector too large for a row
of a page (more than about 2,000 dimensions) still goes out of line. The values are the same, so are every distance
and result. Only rows written from now on are stored inline; rows written before stay where they are (a
re-ingestion of their documents moves them).
"""
from alembic import op

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE chunk_embeddings SET (toast_tuple_target = 8160)")


def downgrade() -> None:
    op.execute("ALTER TABLE chunk_embeddings RESET (toast_tuple_target)")
