"""graded labels (candidate relevance grades, case grades) and datasets' last_seen_at

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

* ``retrieval_evaluation_candidates.relevance_grade`` (smallint 0-10, NULL = not judged): the case's grade
  of the candidate; ``is_relevant`` = grade >= 1. Existing relevant candidates get grade 1 (every dataset
  before graded labels was binary).
* ``retrieval_evaluation_case_results.relevance_grades`` (jsonb ``{chunk_id: grade}``, grade-0 ids
  included). Existing rows stay NULL (readers take each ``relevant_chunk_ids`` entry as grade 1).
* ``retrieval_evaluation_datasets.last_seen_at`` (timestamptz, default now()): moved to now() whenever the
  same version is stored again, so the latest version of a dataset = the greatest ``last_seen_at``.
  Existing versions get the later of their creation and their latest run's start.
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('retrieval_evaluation_candidates', sa.Column('relevance_grade', sa.SmallInteger(), nullable=True))
    op.create_check_constraint('ck_candidates_relevance_grade', 'retrieval_evaluation_candidates',
                               'relevance_grade BETWEEN 0 AND 10')
    op.execute('UPDATE retrieval_evaluation_candidates SET relevance_grade = 1 WHERE is_relevant')
    op.add_column('retrieval_evaluation_case_results',
                  sa.Column('relevance_grades', postgresql.JSONB(astext_type=sa.Text()), nullable=True))
    op.add_column('retrieval_evaluation_datasets',
                  sa.Column('last_seen_at', sa.DateTime(timezone=True), server_default=sa.text('now()'),
                            nullable=False))
    op.execute(
        'UPDATE retrieval_evaluation_datasets d SET last_seen_at = greatest(d.created_at, '
        '(SELECT max(r.started_at) FROM retrieval_evaluation_runs r WHERE r.dataset_id = d.id))')


def downgrade() -> None:
    op.drop_column('retrieval_evaluation_datasets', 'last_seen_at')
    op.drop_column('retrieval_evaluation_case_results', 'relevance_grades')
    op.drop_constraint('ck_candidates_relevance_grade', 'retrieval_evaluation_candidates', type_='check')
    op.drop_column('retrieval_evaluation_candidates', 'relevance_grade')
