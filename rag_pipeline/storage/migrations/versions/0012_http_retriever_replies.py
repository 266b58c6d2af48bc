"""an HTTP retriever's replies kept until its run is stored; each case's latency and retrieval error

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04

* ``http_retriever_replies`` (``params_hash`` text, ``dataset_id`` uuid → retrieval_evaluation_datasets ON DELETE
  CASCADE, ``case_id`` text; primary key the three; ``ranking`` jsonb, ``latency_ms`` float8, ``attempts`` int,
  ``created_at``): each case an ``http`` strategy's retriever answered, committed as it comes, so an evaluation
  killed halfway resumes without asking it again; the stored run's transaction deletes them.
* ``retrieval_evaluation_case_results.latency_ms`` (float8, null: not measured, a built-in strategy) and
  ``retrieval_error`` (text, null: none): the case's reply time and, when the retriever gave no ranking, why.
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('http_retriever_replies',
                    sa.Column('params_hash', sa.Text(), nullable=False),
                    sa.Column('dataset_id', postgresql.UUID(as_uuid=True), nullable=False),
                    sa.Column('case_id', sa.Text(), nullable=False),
                    sa.Column('ranking', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
                    sa.Column('latency_ms', sa.Double(), nullable=False),
                    sa.Column('attempts', sa.Integer(), nullable=False),
                    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'),
                              nullable=False),
                    sa.ForeignKeyConstraint(['dataset_id'], ['retrieval_evaluation_datasets.id'], ondelete='CASCADE'),
                    sa.PrimaryKeyConstraint('params_hash', 'dataset_id', 'case_id'))
    op.add_column('retrieval_evaluation_case_results', sa.Column('latency_ms', sa.Double(), nullable=True))
    op.add_column('retrieval_evaluation_case_results', sa.Column('retrieval_error', sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column('retrieval_evaluation_case_results', 'retrieval_error')
    op.drop_column('retrieval_evaluation_case_results', 'latency_ms')
    op.drop_table('http_retriever_replies')
