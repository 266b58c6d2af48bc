"""the process that runs an evaluation run

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

* ``retrieval_evaluation_runs.owner_host`` (text), ``owner_pid`` (integer) and ``owner_started_at`` (double
  precision, the process's start time in seconds since the epoch): the process evaluating a ``running`` run,
  written when the row becomes ``running``. A run whose process on this host is gone (killed, out of memory,
  or failed while the database was down) is marked ``failed`` by the next check instead of staying ``running``
  until its heartbeat is stale. NULL for the runs made before, and for ``queued`` runs.
"""
import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

COLUMNS: tuple[tuple[str, sa.types.TypeEngine], ...] = (("owner_host", sa.Text()), ("owner_pid", sa.Integer()), ("owner_started_at", sa.Double()))


def upgrade() -> None:
    for name, type_ in COLUMNS:
        op.add_column('retrieval_evaluation_runs', sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    for name, _type in reversed(COLUMNS):
        op.drop_column('retrieval_evaluation_runs', name)
