"""embedding models served by an OpenAI-compatible /v1/embeddings endpoint

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04

* ``embedding_models.endpoint`` (jsonb, null for a shipped model): the definition of a model of backend
  ``endpoint`` (URL, the server's model id, header names with the environment variables their values come from,
  batch size, concurrency, timeout, retries), added by ``rag-pipeline embeddings add-endpoint``. No header value is
  ever stored. A check keeps ``backend = 'endpoint'`` and a definition together. A downgrade keeps such a model's
  row and vectors, without the definition.
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('embedding_models', sa.Column('endpoint', postgresql.JSONB(astext_type=sa.Text()), nullable=True))
    op.create_check_constraint('ck_embedding_models_endpoint', 'embedding_models',
                               "(backend = 'endpoint') = (endpoint IS NOT NULL)")


def downgrade() -> None:
    op.drop_constraint('ck_embedding_models_endpoint', 'embedding_models')
    op.drop_column('embedding_models', 'endpoint')
