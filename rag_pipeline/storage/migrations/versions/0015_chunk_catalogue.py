"""the chunk catalogue of an external system: its chunks' text (knowledge bases of kind ``external``)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04

* ``external_chunk_ids.title`` and ``external_chunk_ids.content`` (text, nullable): a row is now "a chunk of an
  external system: its original id and, when known, its text". ``content IS NOT NULL`` marks a catalogued chunk
  (``rag-pipeline kb catalogue``, or the text an HTTP retriever returned); a catalogued id that is a canonical UUID
  has a row too (``external_id`` = the id). The rows made before keep both null (an id only).
* ``knowledge_bases.kind`` may be ``external``: a knowledge base that holds only a catalogue (nothing ingested).
"""
import sqlalchemy as sa
from alembic import op

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('external_chunk_ids', sa.Column('title', sa.Text()))
    op.add_column('external_chunk_ids', sa.Column('content', sa.Text()))
    op.drop_constraint('ck_knowledge_bases_kind', 'knowledge_bases')
    op.create_check_constraint('ck_knowledge_bases_kind', 'knowledge_bases',
                               "kind IN ('project', 'attached', 'external')")


def downgrade() -> None:
    op.execute("DELETE FROM knowledge_bases WHERE kind = 'external'")
    op.drop_constraint('ck_knowledge_bases_kind', 'knowledge_bases')
    op.create_check_constraint('ck_knowledge_bases_kind', 'knowledge_bases', "kind IN ('project', 'attached')")
    op.execute("DELETE FROM external_chunk_ids WHERE external_id = chunk_id::text")
    op.drop_column('external_chunk_ids', 'content')
    op.drop_column('external_chunk_ids', 'title')
