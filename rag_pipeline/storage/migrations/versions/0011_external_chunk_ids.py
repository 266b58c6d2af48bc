"""the original ids of external systems' documents (TREC run files and qrels)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03

* ``external_chunk_ids`` (``knowledge_base_id`` uuid → knowledge_bases ON DELETE CASCADE, ``chunk_id`` uuid,
  ``external_id`` text; primary key (knowledge_base_id, chunk_id)): a TREC docno that is not a canonical UUID is
  stored as the chunk UUID ``uuid5(namespace, "<knowledge base>\\x1f<docno>")``; this row keeps the docno so an
  export writes it back. Empty for the runs and datasets made before.
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('external_chunk_ids',
                    sa.Column('knowledge_base_id', postgresql.UUID(as_uuid=True), nullable=False),
                    sa.Column('chunk_id', postgresql.UUID(as_uuid=True), nullable=False),
                    sa.Column('external_id', sa.Text(), nullable=False),
                    sa.ForeignKeyConstraint(['knowledge_base_id'], ['knowledge_bases.id'], ondelete='CASCADE'),
                    sa.PrimaryKeyConstraint('knowledge_base_id', 'chunk_id'))


def downgrade() -> None:
    op.drop_table('external_chunk_ids')
