"""indexes for the chunk_id / knowledge_base_id cascades

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

``chunk_terms`` and ``chunk_embeddings`` reference ``document_chunks`` / ``knowledge_bases`` with
ON DELETE CASCADE, but neither had an index leading with the referencing column: deleting a knowledge
base ran one sequential scan of every BM25 posting per deleted chunk (measured: a 2,000-chunk KB next to a
100,000-chunk one did not finish in 4 minutes), and ingestion's retire / token_count statements scanned
all postings too.
"""
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_chunk_terms_chunk_id', 'chunk_terms', ['chunk_id'])
    op.create_index('ix_chunk_embeddings_knowledge_base_id', 'chunk_embeddings', ['knowledge_base_id'])


def downgrade() -> None:
    op.drop_index('ix_chunk_embeddings_knowledge_base_id', table_name='chunk_embeddings')
    op.drop_index('ix_chunk_terms_chunk_id', table_name='chunk_terms')
