"""the knowledge-base version each evaluation run measured

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

* ``retrieval_evaluation_runs.knowledge_base_version`` (64 hex, NULL = unknown): the content version of the
  knowledge base (:mod:`rag_pipeline.knowledge_base.versions`) read in the run's own snapshot. Runs made
  before this revision stay NULL: what they measured cannot be reconstructed.
"""
import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('retrieval_evaluation_runs', sa.Column('knowledge_base_version', sa.String(64), nullable=True))
    op.create_check_constraint('ck_runs_knowledge_base_version', 'retrieval_evaluation_runs',
                               "knowledge_base_version ~ '^[0-9a-f]{64}$'")


def downgrade() -> None:
    op.drop_constraint('ck_runs_knowledge_base_version', 'retrieval_evaluation_runs', type_='check')
    op.drop_column('retrieval_evaluation_runs', 'knowledge_base_version')
