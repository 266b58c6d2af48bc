"""covering indexes for a knowledge base's content version

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05

The content version (``knowledge_base.versions``) hashes a knowledge base's searchable chunk ids in id order, each
with its embedding models, and counts the searchable vectors per model. It read the whole ``document_chunks`` table
(the chunks' text included) and the whole ``chunk_embeddings`` table (the vectors included) and sorted both: 0.29 s
at 100,000 chunks, before every run. Two indexes give the same rows in id order from the index alone:

- ``ix_document_chunks_kb_current_id``: a knowledge base's current chunks by id, with their document;
- ``ix_chunk_embeddings_kb_chunk_model``: a knowledge base's vectors by chunk id and model. It replaces
  ``ix_chunk_embeddings_knowledge_base_id`` (its first column), which served the cascade from a deleted knowledge
  base and still does.

Same rows, so the same version; 0.15 s at 100,000 chunks (bench/RESULTS.md).
"""
from alembic import op

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX ix_document_chunks_kb_current_id ON document_chunks (knowledge_base_id, id) "
               "INCLUDE (document_id) WHERE is_current")
    op.execute("CREATE INDEX ix_chunk_embeddings_kb_chunk_model ON chunk_embeddings (knowledge_base_id, chunk_id, "
               "model)")
    op.execute("DROP INDEX ix_chunk_embeddings_knowledge_base_id")


def downgrade() -> None:
    op.execute("CREATE INDEX ix_chunk_embeddings_knowledge_base_id ON chunk_embeddings (knowledge_base_id)")
    op.execute("DROP INDEX ix_chunk_embeddings_kb_chunk_model")
    op.execute("DROP INDEX ix_document_chunks_kb_current_id")
