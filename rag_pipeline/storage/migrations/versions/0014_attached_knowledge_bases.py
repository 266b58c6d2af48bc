"""knowledge bases attached from the user's own PostgreSQL database (read only)

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04

* ``knowledge_bases.kind`` (``project``: ingested into this database; ``attached``: the user's tables, searched
  read-only), ``attached_mapping`` (jsonb, the validated mapping of an attached one: table, columns, filter) and
  ``url_env`` (the environment variable holding its URL; the URL and its password are never stored).
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('knowledge_bases', sa.Column('kind', sa.String(20), nullable=False, server_default='project'))
    op.add_column('knowledge_bases', sa.Column('attached_mapping', postgresql.JSONB(astext_type=sa.Text())))
    op.add_column('knowledge_bases', sa.Column('url_env', sa.String(200)))
    op.create_check_constraint('ck_knowledge_bases_kind', 'knowledge_bases', "kind IN ('project', 'attached')")


def downgrade() -> None:
    op.drop_constraint('ck_knowledge_bases_kind', 'knowledge_bases')
    op.drop_column('knowledge_bases', 'url_env')
    op.drop_column('knowledge_bases', 'attached_mapping')
    op.drop_column('knowledge_bases', 'kind')
