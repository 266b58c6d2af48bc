"""answer runs and their per-case results

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

* ``answer_runs``: one scored answers file (docs/design.md §12.6) — the dataset version and knowledge base (both
  ``ON DELETE CASCADE``), the knowledge-base content version, the answerer (name, version), the scoring settings
  (JSONB) and their hash, the answers file's SHA-256, the run it was re-scored from (``ON DELETE SET NULL``), the
  case and answered counts, one double precision column per answer metric mean, the refusal figures, the
  summary (JSONB) and the Dagster partition / run.
* ``answer_case_results``: one row per case of a run (``ON DELETE CASCADE``), primary key (run, case id): the
  verdict (a check constraint lists the seven), the refusal, one column per metric (NULL = undefined for the
  case), the answer line it was scored from and the whole case result (JSONB).
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

METRICS = ("exact_match", "f1", "answer_contains", "key_point_recall", "citation_precision", "citation_recall",
           "citation_validity", "sentence_citation_coverage", "lexical_support", "answer_score")
VERDICTS = ("correct", "retrieval_miss", "generation_miss", "citation_miss", "false_refusal",
            "answered_unanswerable", "unscored")
HEX64 = "'^[0-9a-f]{64}$'"


def upgrade() -> None:
    op.create_table(
        'answer_runs',
        sa.Column('id', UUID(as_uuid=True), primary_key=True),
        sa.Column('dataset_id', UUID(as_uuid=True),
                  sa.ForeignKey('retrieval_evaluation_datasets.id', ondelete='CASCADE'), nullable=False),
        sa.Column('knowledge_base_id', UUID(as_uuid=True), sa.ForeignKey('knowledge_bases.id', ondelete='CASCADE'),
                  nullable=False),
        sa.Column('knowledge_base_version', sa.String(64)),
        sa.Column('answerer', sa.String(200), nullable=False),
        sa.Column('answerer_version', sa.String(200), nullable=False),
        sa.Column('scoring_version', sa.String(64), nullable=False),
        sa.Column('scoring', JSONB, nullable=False),
        sa.Column('answers_sha256', sa.String(64), nullable=False),
        sa.Column('rescored_from', UUID(as_uuid=True), sa.ForeignKey('answer_runs.id', ondelete='SET NULL')),
        sa.Column('case_count', sa.Integer(), nullable=False),
        sa.Column('answered', sa.Integer(), nullable=False),
        *(sa.Column(m, sa.Double()) for m in METRICS),
        sa.Column('refusal_recall', sa.Double()),
        sa.Column('false_refusal_rate', sa.Double()),
        sa.Column('summary', JSONB, nullable=False),
        sa.Column('partition_key', sa.Text()),
        sa.Column('dagster_run_id', sa.String(64)),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.CheckConstraint(f"knowledge_base_version ~ {HEX64}", name='ck_answer_runs_knowledge_base_version'),
        sa.CheckConstraint(f"answers_sha256 ~ {HEX64}", name='ck_answer_runs_answers_sha256'),
        sa.CheckConstraint("answered BETWEEN 0 AND case_count", name='ck_answer_runs_answered'),
    )
    op.create_index('ix_answer_runs_dataset_answerer', 'answer_runs', ['dataset_id', 'answerer', 'created_at'])
    op.create_index('ix_answer_runs_kb', 'answer_runs', ['knowledge_base_id'])
    op.create_table(
        'answer_case_results',
        sa.Column('run_id', UUID(as_uuid=True), sa.ForeignKey('answer_runs.id', ondelete='CASCADE'),
                  primary_key=True),
        sa.Column('case_id', sa.Text(), primary_key=True),
        sa.Column('case_index', sa.Integer(), nullable=False),
        sa.Column('verdict', sa.String(32), nullable=False),
        sa.Column('refused', sa.Boolean(), nullable=False),
        *(sa.Column(m, sa.Double()) for m in METRICS),
        sa.Column('record', JSONB),
        sa.Column('result', JSONB, nullable=False),
        sa.CheckConstraint("verdict IN (" + ", ".join(f"'{v}'" for v in VERDICTS) + ")",
                           name='ck_answer_case_results_verdict'),
    )
    op.create_index('ix_answer_case_results_verdict', 'answer_case_results', ['run_id', 'verdict'])


def downgrade() -> None:
    op.drop_table('answer_case_results')
    op.drop_table('answer_runs')
