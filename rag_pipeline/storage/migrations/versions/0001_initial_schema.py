"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-30

Creates the pgvector extension and every table of rag_pipeline.storage.tables / eval_models.
Per-model HNSW indexes are created when a model is first used (db.ensure_embedding_model).
"""
import pgvector.sqlalchemy
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute('CREATE EXTENSION IF NOT EXISTS vector')
    op.create_table('embedding_models',
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('dimension', sa.Integer(), nullable=False),
    sa.Column('backend', sa.String(length=100), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('knowledge_bases',
    sa.Column('id', sa.UUID(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('text_search', sa.String(length=20), nullable=False),
    sa.Column('chunk_size', sa.Integer(), nullable=False),
    sa.Column('chunk_overlap', sa.Integer(), nullable=False),
    sa.Column('chunk_count', sa.Integer(), nullable=False),
    sa.Column('avg_chunk_length', sa.Double(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    op.create_table('retrieval_evaluation_datasets',
    sa.Column('id', sa.UUID(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('knowledge_base_name', sa.String(length=200), nullable=False),
    sa.Column('source_path', sa.Text(), nullable=True),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('case_count', sa.Integer(), nullable=False),
    sa.Column('cases', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name', 'knowledge_base_name', 'content_hash')
    )
    op.create_table('retrieval_strategies',
    sa.Column('version', sa.String(length=100), nullable=False),
    sa.Column('params_hash', sa.String(length=64), nullable=False),
    sa.Column('params', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('version')
    )
    op.create_table('documents',
    sa.Column('id', sa.UUID(), nullable=False),
    sa.Column('knowledge_base_id', sa.UUID(), nullable=False),
    sa.Column('original_name', sa.Text(), nullable=False),
    sa.Column('title', sa.Text(), nullable=True),
    sa.Column('content', sa.Text(), nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('status', sa.Enum('PROCESSING', 'READY', 'FAILED', name='document_status'), nullable=False),
    sa.Column('publication_status', sa.Enum('DRAFT', 'PUBLISHED', 'UNPUBLISHED', name='document_publication_status'), nullable=False),
    sa.Column('is_deleted', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['knowledge_base_id'], ['knowledge_bases.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('knowledge_base_id', 'original_name')
    )
    op.create_index(op.f('ix_documents_knowledge_base_id'), 'documents', ['knowledge_base_id'], unique=False)
    op.create_table('knowledge_base_term_stats',
    sa.Column('knowledge_base_id', sa.UUID(), nullable=False),
    sa.Column('lexeme', sa.Text(), nullable=False),
    sa.Column('doc_freq', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['knowledge_base_id'], ['knowledge_bases.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('knowledge_base_id', 'lexeme')
    )
    op.create_table('retrieval_evaluation_runs',
    sa.Column('id', sa.UUID(), nullable=False),
    sa.Column('dataset_id', sa.UUID(), nullable=False),
    sa.Column('knowledge_base_id', sa.UUID(), nullable=False),
    sa.Column('strategy_version', sa.String(length=100), nullable=False),
    sa.Column('params_hash', sa.String(length=64), nullable=False),
    sa.Column('strategy_params', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('embedding_model', sa.String(length=100), nullable=True),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('is_current', sa.Boolean(), nullable=False),
    sa.Column('partition_key', sa.Text(), nullable=True),
    sa.Column('dagster_run_id', sa.String(length=64), nullable=True),
    sa.Column('case_count', sa.Integer(), nullable=False),
    sa.Column('candidate_count', sa.Integer(), nullable=False),
    sa.Column('precision_at_k', sa.Double(), nullable=True),
    sa.Column('recall_at_k', sa.Double(), nullable=True),
    sa.Column('reciprocal_rank', sa.Double(), nullable=True),
    sa.Column('ndcg_at_k', sa.Double(), nullable=True),
    sa.Column('hit_at_k', sa.Double(), nullable=True),
    sa.Column('average_precision_at_k', sa.Double(), nullable=True),
    sa.Column('r_precision', sa.Double(), nullable=True),
    sa.Column('timings', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    sa.Column('summary', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('heartbeat_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['dataset_id'], ['retrieval_evaluation_datasets.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['knowledge_base_id'], ['knowledge_bases.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_runs_dataset_strategy', 'retrieval_evaluation_runs', ['dataset_id', 'strategy_version'], unique=False)
    op.create_index('ix_runs_kb', 'retrieval_evaluation_runs', ['knowledge_base_id'], unique=False)
    op.create_table('document_chunks',
    sa.Column('id', sa.UUID(), nullable=False),
    sa.Column('knowledge_base_id', sa.UUID(), nullable=False),
    sa.Column('document_id', sa.UUID(), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('content', sa.Text(), nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('char_start', sa.Integer(), nullable=False),
    sa.Column('char_end', sa.Integer(), nullable=False),
    sa.Column('content_tsvector', postgresql.TSVECTOR(), nullable=False),
    sa.Column('token_count', sa.Integer(), nullable=False),
    sa.Column('is_current', sa.Boolean(), nullable=False),
    sa.Column('replaced_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['document_id'], ['documents.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['knowledge_base_id'], ['knowledge_bases.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index(op.f('ix_document_chunks_document_id'), 'document_chunks', ['document_id'], unique=False)
    op.create_index('ix_document_chunks_kb_current', 'document_chunks', ['knowledge_base_id', 'is_current'], unique=False)
    op.create_index('ix_document_chunks_tsv', 'document_chunks', ['content_tsvector'], unique=False, postgresql_using='gin')
    op.create_table('retrieval_evaluation_candidates',
    sa.Column('id', sa.BigInteger(), autoincrement=True, nullable=False),
    sa.Column('evaluation_run_id', sa.UUID(), nullable=False),
    sa.Column('case_id', sa.Text(), nullable=False),
    sa.Column('chunk_id', sa.UUID(), nullable=False),
    sa.Column('document_id', sa.UUID(), nullable=False),
    sa.Column('document_name', sa.Text(), nullable=False),
    sa.Column('rank', sa.Integer(), nullable=False),
    sa.Column('vector_score', sa.Double(), nullable=True),
    sa.Column('vector_rank', sa.Integer(), nullable=True),
    sa.Column('keyword_score', sa.Double(), nullable=True),
    sa.Column('keyword_rank', sa.Integer(), nullable=True),
    sa.Column('rerank_score', sa.Double(), nullable=True),
    sa.Column('final_score', sa.Double(), nullable=False),
    sa.Column('is_relevant', sa.Boolean(), nullable=False),
    sa.Column('is_selected', sa.Boolean(), nullable=False),
    sa.Column('strategy_version', sa.String(length=100), nullable=False),
    sa.ForeignKeyConstraint(['evaluation_run_id'], ['retrieval_evaluation_runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_candidates_run_case', 'retrieval_evaluation_candidates', ['evaluation_run_id', 'case_id', 'rank'], unique=False)
    op.create_table('retrieval_evaluation_case_results',
    sa.Column('evaluation_run_id', sa.UUID(), nullable=False),
    sa.Column('case_id', sa.Text(), nullable=False),
    sa.Column('case_index', sa.Integer(), nullable=False),
    sa.Column('question', sa.Text(), nullable=False),
    sa.Column('k', sa.Integer(), nullable=False),
    sa.Column('relevant_chunk_ids', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('retrieved_chunk_ids', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('first_relevant_rank', sa.Integer(), nullable=True),
    sa.Column('precision_at_k', sa.Double(), nullable=False),
    sa.Column('recall_at_k', sa.Double(), nullable=False),
    sa.Column('reciprocal_rank', sa.Double(), nullable=False),
    sa.Column('ndcg_at_k', sa.Double(), nullable=False),
    sa.Column('hit_at_k', sa.Double(), nullable=False),
    sa.Column('average_precision_at_k', sa.Double(), nullable=False),
    sa.Column('r_precision', sa.Double(), nullable=False),
    sa.Column('miss_reasons', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    sa.ForeignKeyConstraint(['evaluation_run_id'], ['retrieval_evaluation_runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('evaluation_run_id', 'case_id')
    )
    op.create_table('chunk_embeddings',
    sa.Column('chunk_id', sa.UUID(), nullable=False),
    sa.Column('model', sa.String(length=100), nullable=False),
    sa.Column('knowledge_base_id', sa.UUID(), nullable=False),
    sa.Column('embedding', pgvector.sqlalchemy.vector.VECTOR(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['chunk_id'], ['document_chunks.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['knowledge_base_id'], ['knowledge_bases.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['model'], ['embedding_models.name'], ),
    sa.PrimaryKeyConstraint('chunk_id', 'model')
    )
    op.create_table('chunk_terms',
    sa.Column('knowledge_base_id', sa.UUID(), nullable=False),
    sa.Column('lexeme', sa.Text(), nullable=False),
    sa.Column('chunk_id', sa.UUID(), nullable=False),
    sa.Column('tf', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['chunk_id'], ['document_chunks.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('knowledge_base_id', 'lexeme', 'chunk_id')
    )


def downgrade() -> None:
    op.drop_table('chunk_terms')
    op.drop_table('chunk_embeddings')
    op.drop_table('retrieval_evaluation_case_results')
    op.drop_index('ix_candidates_run_case', table_name='retrieval_evaluation_candidates')
    op.drop_table('retrieval_evaluation_candidates')
    op.drop_index('ix_document_chunks_tsv', table_name='document_chunks', postgresql_using='gin')
    op.drop_index('ix_document_chunks_kb_current', table_name='document_chunks')
    op.drop_index(op.f('ix_document_chunks_document_id'), table_name='document_chunks')
    op.drop_table('document_chunks')
    op.drop_index('ix_runs_kb', table_name='retrieval_evaluation_runs')
    op.drop_index('ix_runs_dataset_strategy', table_name='retrieval_evaluation_runs')
    op.drop_table('retrieval_evaluation_runs')
    op.drop_table('knowledge_base_term_stats')
    op.drop_index(op.f('ix_documents_knowledge_base_id'), table_name='documents')
    op.drop_table('documents')
    op.drop_table('retrieval_strategies')
    op.drop_table('retrieval_evaluation_datasets')
    op.drop_table('knowledge_bases')
    op.drop_table('embedding_models')
    op.execute('DROP TYPE IF EXISTS document_status')
    op.execute('DROP TYPE IF EXISTS document_publication_status')
