"""runs at scale: candidates partitioned by run (prune = DROP of a partition), slimmer rows, question embeddings

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

* ``retrieval_evaluation_candidate_rows``: the candidate snapshot storage, ``PARTITION BY LIST
  (evaluation_run_id)``, one partition per run (``eval_candidates_<run id hex>``, created by
  ``rag_candidate_partition(run_id)`` when the run is created, attached with ATTACH PARTITION so concurrent
  runs never wait for each other). The row keeps only what no join gives: run id, ``case_index`` (the case's
  position; its ``case_id`` is in ``retrieval_evaluation_case_results``), chunk id, the scores and ranks,
  ``is_selected`` and ``relevance_grade``. ``document_id`` / ``document_name`` come from the chunk,
  ``strategy_version`` from the run, ``is_relevant`` = grade >= 1.
* ``retrieval_evaluation_candidates`` (the original design's name) becomes a view with every docs/design.md §4.1 field
  (plus ``relevance_grade``, ``vector_rank``, ``keyword_rank``, ``rerank_score``), so every reader is unchanged.
  An INSTEAD OF INSERT trigger routes a row written to the view into its run's partition.
* Deleting a run row (retention, or a knowledge base deletion cascading to its runs) drops its partition
  (trigger ``rag_drop_candidate_partition``): a metadata operation, not a DELETE of its rows.
* ``question_embeddings``: one vector per (sha256 of the question text, model), reused by later runs.
* ``retrieval_comparison_runs``: the runs each stored comparison (dataset × knowledge base) refers to;
  retention keeps them.
* Vector search per knowledge base: each KB × model gets its own partial HNSW index
  (``ix_emb_hnsw_<kb id hex>_<model md5[:8]>``, ``WHERE model = ... AND knowledge_base_id = ...``) and the shared
  per-model indexes (``ix_chunk_embeddings_hnsw_<model>``) are dropped: another KB's live or deleted vectors are
  no longer in the graph a KB's search walks. Embeddings of replaced (non-current) chunks are deleted.
* Existing candidate rows are copied into their runs' partitions (the old table is dropped).
"""
import hashlib
import re
import uuid

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import Vector

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

PARTITION_FUNCTION = """
CREATE FUNCTION rag_candidate_partition_name(run uuid) RETURNS text LANGUAGE sql IMMUTABLE AS
$$ SELECT 'eval_candidates_' || replace(run::text, '-', '') $$;

CREATE FUNCTION rag_candidate_partition(run uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    part text := rag_candidate_partition_name(run);
BEGIN
    IF to_regclass(quote_ident(part)) IS NOT NULL THEN
        RETURN;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE retrieval_evaluation_candidate_rows INCLUDING DEFAULTS '
                   'INCLUDING CONSTRAINTS)', part);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (evaluation_run_id = %L)', part, part || '_run', run);
    EXECUTE format('ALTER TABLE retrieval_evaluation_candidate_rows ATTACH PARTITION %I FOR VALUES IN (%L)',
                   part, run);
END $$;

CREATE FUNCTION rag_drop_candidate_partition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DROP TABLE IF EXISTS %I', rag_candidate_partition_name(OLD.id));
    RETURN OLD;
END $$;

CREATE TRIGGER rag_drop_candidate_partition AFTER DELETE ON retrieval_evaluation_runs
    FOR EACH ROW EXECUTE FUNCTION rag_drop_candidate_partition();
"""

VIEW = """
CREATE VIEW retrieval_evaluation_candidates AS
SELECT c.evaluation_run_id, r.case_id, c.chunk_id, ch.document_id, d.original_name AS document_name, c.rank,
       c.vector_score, c.vector_rank, c.keyword_score, c.keyword_rank, c.rerank_score, c.final_score,
       coalesce(c.relevance_grade >= 1, false) AS is_relevant, c.is_selected, run.strategy_version,
       c.relevance_grade, c.case_index
FROM retrieval_evaluation_candidate_rows c
JOIN retrieval_evaluation_case_results r ON r.evaluation_run_id = c.evaluation_run_id AND r.case_index = c.case_index
JOIN retrieval_evaluation_runs run ON run.id = c.evaluation_run_id
LEFT JOIN document_chunks ch ON ch.id = c.chunk_id
LEFT JOIN documents d ON d.id = ch.document_id;

CREATE FUNCTION rag_insert_candidate() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    idx integer := NEW.case_index;
BEGIN
    IF idx IS NULL THEN
        SELECT case_index INTO idx FROM retrieval_evaluation_case_results
        WHERE evaluation_run_id = NEW.evaluation_run_id AND case_id = NEW.case_id;
        IF idx IS NULL THEN
            RAISE EXCEPTION 'candidate of case % of run %: store the case result first', NEW.case_id,
                NEW.evaluation_run_id;
        END IF;
    END IF;
    PERFORM rag_candidate_partition(NEW.evaluation_run_id);
    INSERT INTO retrieval_evaluation_candidate_rows (evaluation_run_id, case_index, chunk_id, rank, vector_score,
        vector_rank, keyword_score, keyword_rank, rerank_score, final_score, is_selected, relevance_grade)
    VALUES (NEW.evaluation_run_id, idx, NEW.chunk_id, NEW.rank, NEW.vector_score, NEW.vector_rank,
        NEW.keyword_score, NEW.keyword_rank, NEW.rerank_score, NEW.final_score, NEW.is_selected,
        coalesce(NEW.relevance_grade, CASE WHEN NEW.is_relevant THEN 1 END));
    RETURN NEW;
END $$;

CREATE TRIGGER rag_insert_candidate INSTEAD OF INSERT ON retrieval_evaluation_candidates
    FOR EACH ROW EXECUTE FUNCTION rag_insert_candidate();
"""


def upgrade() -> None:
    op.create_table(
        'retrieval_evaluation_candidate_rows',
        # fixed-width columns first, widest first: no alignment padding
        sa.Column('evaluation_run_id', sa.Uuid(), nullable=False),
        sa.Column('chunk_id', sa.Uuid(), nullable=False),
        sa.Column('final_score', sa.Double(), nullable=False),
        sa.Column('vector_score', sa.Double(), nullable=True),
        sa.Column('keyword_score', sa.Double(), nullable=True),
        sa.Column('rerank_score', sa.Double(), nullable=True),
        sa.Column('case_index', sa.Integer(), nullable=False),
        sa.Column('rank', sa.Integer(), nullable=False),
        sa.Column('keyword_rank', sa.Integer(), nullable=True),
        sa.Column('vector_rank', sa.SmallInteger(), nullable=True),
        sa.Column('relevance_grade', sa.SmallInteger(), nullable=True),
        sa.Column('is_selected', sa.Boolean(), nullable=False),
        sa.CheckConstraint('relevance_grade BETWEEN 0 AND 10', name='ck_candidate_rows_relevance_grade'),
        sa.PrimaryKeyConstraint('evaluation_run_id', 'case_index', 'rank', name='pk_candidate_rows'),
        postgresql_partition_by='LIST (evaluation_run_id)',
    )
    op.create_index('ix_case_results_run_case_index', 'retrieval_evaluation_case_results',
                    ['evaluation_run_id', 'case_index'], unique=True)
    op.execute(PARTITION_FUNCTION)
    orphans = op.get_bind().execute(sa.text(
        "SELECT count(*) FROM retrieval_evaluation_candidates c WHERE NOT EXISTS (SELECT 1 FROM "
        "retrieval_evaluation_case_results r WHERE r.evaluation_run_id = c.evaluation_run_id AND r.case_id = c.case_id)"
    )).scalar_one()
    if orphans:  # never written by this project (candidates and case results commit together): refuse, lose nothing
        raise RuntimeError(f"{orphans} stored candidate row(s) have no case result (their case_index is unknown); "
                           "delete them or their runs, then upgrade again")
    op.execute("SELECT rag_candidate_partition(id) FROM retrieval_evaluation_runs "
               "WHERE id IN (SELECT DISTINCT evaluation_run_id FROM retrieval_evaluation_candidates)")
    op.execute("""
        INSERT INTO retrieval_evaluation_candidate_rows (evaluation_run_id, case_index, chunk_id, rank, vector_score,
            vector_rank, keyword_score, keyword_rank, rerank_score, final_score, is_selected, relevance_grade)
        SELECT c.evaluation_run_id, r.case_index, c.chunk_id, c.rank, c.vector_score, c.vector_rank, c.keyword_score,
               c.keyword_rank, c.rerank_score, c.final_score, c.is_selected,
               coalesce(c.relevance_grade, CASE WHEN c.is_relevant THEN 1 END)
        FROM retrieval_evaluation_candidates c
        JOIN retrieval_evaluation_case_results r ON r.evaluation_run_id = c.evaluation_run_id AND r.case_id = c.case_id
    """)
    op.drop_table('retrieval_evaluation_candidates')
    op.execute(VIEW)
    op.create_table(
        'question_embeddings',
        sa.Column('question_hash', sa.LargeBinary(), nullable=False),
        sa.Column('model', sa.String(100), sa.ForeignKey('embedding_models.name', ondelete='CASCADE'),
                  nullable=False),
        sa.Column('embedding', Vector(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.PrimaryKeyConstraint('question_hash', 'model'),
    )
    _per_kb_vector_indexes()
    op.create_table(
        'retrieval_comparison_runs',
        sa.Column('comparison', sa.Text(), nullable=False),
        sa.Column('evaluation_run_id', sa.Uuid(), sa.ForeignKey('retrieval_evaluation_runs.id', ondelete='CASCADE'),
                  nullable=False),
        sa.Column('compared_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.PrimaryKeyConstraint('comparison', 'evaluation_run_id'),
    )
    op.create_index('ix_comparison_runs_run', 'retrieval_comparison_runs', ['evaluation_run_id'])


def _kb_index(model: str, kb) -> str:
    return f"ix_emb_hnsw_{uuid.UUID(str(kb)).hex}_{hashlib.md5(model.encode(), usedforsecurity=False).hexdigest()[:8]}"


def _model_index(model: str) -> str:
    return "ix_chunk_embeddings_hnsw_" + re.sub(r"[^a-z0-9]+", "_", model.lower()).strip("_")


def _literal(model: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9._/-]+", model):
        raise RuntimeError(f"invalid embedding model name {model!r}")
    return model


def _per_kb_vector_indexes() -> None:
    bind = op.get_bind()
    bind.execute(sa.text("DELETE FROM chunk_embeddings e USING document_chunks c "
                         "WHERE c.id = e.chunk_id AND NOT c.is_current"))
    for model, dim in bind.execute(sa.text("SELECT name, dimension FROM embedding_models")).all():
        op.execute(f"DROP INDEX IF EXISTS {_model_index(model)}")
        kbs = bind.execute(sa.text("SELECT DISTINCT knowledge_base_id FROM chunk_embeddings WHERE model = :m"),
                           {"m": model}).scalars().all()
        for kb in kbs:
            op.execute(f"CREATE INDEX IF NOT EXISTS {_kb_index(model, kb)} ON chunk_embeddings USING hnsw "
                       f"((embedding::vector({int(dim)})) vector_cosine_ops) "
                       f"WHERE model = '{_literal(model)}' AND knowledge_base_id = '{uuid.UUID(str(kb))}'")


def _per_model_vector_indexes() -> None:
    bind = op.get_bind()
    for name in bind.execute(sa.text("SELECT indexname FROM pg_indexes WHERE tablename = 'chunk_embeddings' "
                                     "AND indexname LIKE 'ix\\_emb\\_hnsw\\_%'")).scalars().all():
        op.execute(f'DROP INDEX IF EXISTS "{name}"')
    for model, dim in bind.execute(sa.text("SELECT name, dimension FROM embedding_models")).all():
        op.execute(f"CREATE INDEX IF NOT EXISTS {_model_index(model)} ON chunk_embeddings USING hnsw "
                   f"((embedding::vector({int(dim)})) vector_cosine_ops) WHERE model = '{_literal(model)}'")


def downgrade() -> None:
    _per_model_vector_indexes()
    op.drop_table('retrieval_comparison_runs')
    op.drop_table('question_embeddings')
    op.execute("DROP TRIGGER rag_insert_candidate ON retrieval_evaluation_candidates")
    op.execute("DROP FUNCTION rag_insert_candidate()")
    op.execute("ALTER VIEW retrieval_evaluation_candidates RENAME TO retrieval_evaluation_candidates_v")
    op.execute("""
        CREATE TABLE retrieval_evaluation_candidates (
            id bigserial PRIMARY KEY,
            evaluation_run_id uuid NOT NULL REFERENCES retrieval_evaluation_runs (id) ON DELETE CASCADE,
            case_id text NOT NULL, chunk_id uuid NOT NULL, document_id uuid NOT NULL, document_name text NOT NULL,
            rank integer NOT NULL, vector_score double precision, vector_rank integer, keyword_score double precision,
            keyword_rank integer, rerank_score double precision, final_score double precision NOT NULL,
            is_relevant boolean NOT NULL, is_selected boolean NOT NULL, strategy_version varchar(100) NOT NULL,
            relevance_grade smallint, CONSTRAINT ck_candidates_relevance_grade CHECK (relevance_grade BETWEEN 0 AND 10)
        )""")
    op.execute("""
        INSERT INTO retrieval_evaluation_candidates (evaluation_run_id, case_id, chunk_id, document_id, document_name,
            rank, vector_score, vector_rank, keyword_score, keyword_rank, rerank_score, final_score, is_relevant,
            is_selected, strategy_version, relevance_grade)
        SELECT evaluation_run_id, case_id, chunk_id, coalesce(document_id, chunk_id), coalesce(document_name, ''),
               rank, vector_score, vector_rank, keyword_score, keyword_rank, rerank_score, final_score, is_relevant,
               is_selected, strategy_version, relevance_grade
        FROM retrieval_evaluation_candidates_v ORDER BY evaluation_run_id, case_index, rank""")
    op.create_index('ix_candidates_run_case', 'retrieval_evaluation_candidates',
                    ['evaluation_run_id', 'case_id', 'rank'])
    op.execute("DROP VIEW retrieval_evaluation_candidates_v")
    op.execute("DROP TRIGGER rag_drop_candidate_partition ON retrieval_evaluation_runs")
    op.execute("DROP FUNCTION rag_drop_candidate_partition()")
    op.drop_table('retrieval_evaluation_candidate_rows')  # drops every partition with it
    op.execute("DROP FUNCTION rag_candidate_partition(uuid)")
    op.execute("DROP FUNCTION rag_candidate_partition_name(uuid)")
    op.drop_index('ix_case_results_run_case_index', table_name='retrieval_evaluation_case_results')
