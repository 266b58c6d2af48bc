"""queued evaluation runs and per-batch progress

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30

* ``retrieval_evaluation_runs.status`` gains ``queued`` (a run the HTTP API submitted to Dagster that has not
  started yet): ``queued`` → ``running`` → ``succeeded`` | ``failed`` | ``abandoned``; a check constraint now
  lists the five statuses (every existing row has one of the four older ones).
* ``retrieval_evaluation_runs.cases_done`` (integer, default 0): cases evaluated so far, updated with the
  heartbeat after every batch (the total is the dataset version's ``case_count``). Existing succeeded runs get
  their ``case_count``.
* ``retrieval_evaluation_runs.queued_at`` (timestamptz, NULL for runs that never waited in a queue): when the
  run was submitted; ``started_at`` is then moved to the moment it really started.
"""
import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

STATUSES = "('queued', 'running', 'succeeded', 'failed', 'abandoned')"


def upgrade() -> None:
    op.add_column('retrieval_evaluation_runs',
                  sa.Column('cases_done', sa.Integer(), server_default=sa.text('0'), nullable=False))
    op.add_column('retrieval_evaluation_runs', sa.Column('queued_at', sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE retrieval_evaluation_runs SET cases_done = case_count WHERE status = 'succeeded'")
    op.create_check_constraint('ck_runs_status', 'retrieval_evaluation_runs', f'status IN {STATUSES}')


def downgrade() -> None:
    # a queued run has no results and no older status to return to: it becomes a failed run
    op.execute("UPDATE retrieval_evaluation_runs SET status = 'failed', finished_at = coalesce(finished_at, now()), "
               "error = coalesce(error, 'queued when the schema was downgraded below 0006') "
               "WHERE status = 'queued'")
    op.drop_constraint('ck_runs_status', 'retrieval_evaluation_runs', type_='check')
    op.drop_column('retrieval_evaluation_runs', 'queued_at')
    op.drop_column('retrieval_evaluation_runs', 'cases_done')
