"""the queue of evaluation runs: which one a run is in, and when a Dagster sensor last ran

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03

* ``retrieval_evaluation_runs.queue`` (text, NULL): the queue (``RAG_EVALUATION_QUEUE``) of a run the HTTP API or
  the console queued; the ``queued_evaluations`` sensor of a Dagster daemon serving that queue runs it. NULL for the
  runs made before and outside the queue.
* ``dagster_sensor_ticks`` (``sensor`` text primary key, ``ticked_at`` timestamptz): the last tick of each
  Dagster sensor that records one. The ``queued_evaluations`` sensor turns the ``queued`` runs of the HTTP API and
  the console into Dagster runs; the API and the console, which do not talk to Dagster, read its last tick to say
  whether a daemon is picking queued runs up.
"""
import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('retrieval_evaluation_runs', sa.Column('queue', sa.Text(), nullable=True))
    op.create_table('dagster_sensor_ticks',
                    sa.Column('sensor', sa.Text(), primary_key=True),
                    sa.Column('ticked_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False))


def downgrade() -> None:
    op.drop_table('dagster_sensor_ticks')
    op.drop_column('retrieval_evaluation_runs', 'queue')
