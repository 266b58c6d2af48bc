"""the worker that executed an evaluation run

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

* ``retrieval_evaluation_runs.worker`` (text, NULL): the process that executed the run — a Celery worker's node
  name (``NAME@host``, deploy/celery/README.md) or, under the default run launcher, the host name. NULL for runs
  made outside Dagster and for every run older than this revision.
"""
import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('retrieval_evaluation_runs', sa.Column('worker', sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column('retrieval_evaluation_runs', 'worker')
