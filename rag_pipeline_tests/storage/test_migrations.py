"""Alembic migrations: head applied, every table present, CLI upgrade/downgrade round trip, models == schema."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from rag_pipeline.storage import evaluation_schema as eval_models  # noqa: F401 - registers the evaluation tables
from rag_pipeline.storage.engine import alembic_config
from rag_pipeline.storage.schema import Base
from rag_pipeline_tests.reliability_helpers import scratch_database

ROOT = Path(__file__).resolve().parents[2]
ALEMBIC = Path(sys.executable).parent / "alembic"

EXPECTED_TABLES = {
    "knowledge_bases", "documents", "document_chunks", "chunk_embeddings", "embedding_models", "chunk_terms",
    "knowledge_base_term_stats", "retrieval_evaluation_datasets", "retrieval_evaluation_runs",
    "retrieval_evaluation_candidates", "retrieval_evaluation_case_results", "retrieval_strategies",
}
HNSW_PREFIX = "ix_chunk_embeddings_hnsw_"


def _heads() -> set[str]:
    return set(ScriptDirectory.from_config(alembic_config("postgresql+psycopg:///unused")).get_heads())


def _tables(conn: sa.Connection) -> set[str]:
    return set(sa.inspect(conn).get_table_names())


def _versions(conn: sa.Connection) -> set[str]:
    return set(conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars())


def test_single_head_is_applied(engine) -> None:
    heads = _heads()
    assert len(heads) == 1, f"the migration history must have one head, found {heads}"
    with engine.connect() as conn:
        assert _versions(conn) == heads


def test_every_expected_table_and_the_vector_extension_exist(engine) -> None:
    with engine.connect() as conn:
        tables = _tables(conn)
        assert EXPECTED_TABLES <= tables, f"missing: {EXPECTED_TABLES - tables}"
        assert conn.execute(sa.text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).scalar()
        # every model's table was created by a migration
        assert set(Base.metadata.tables) <= tables


@pytest.fixture(scope="module")
def scratch_db(engine):  # noqa: ARG001 - the session server must be up
    """A fresh, empty database on the test server (dropped afterwards): (libpq URL, SQLAlchemy URL)."""
    with scratch_database("rag_migtest") as urls:
        yield urls


def _alembic(url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAG_DATABASE_URL": url}
    proc = subprocess.run([str(ALEMBIC), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"alembic {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_alembic_cli_upgrade_downgrade_round_trip(scratch_db: tuple[str, str]) -> None:
    url, sqlalchemy_url = scratch_db
    eng = sa.create_engine(sqlalchemy_url)
    try:
        with eng.connect() as conn:
            assert not (_tables(conn) & EXPECTED_TABLES)

        _alembic(url, "upgrade", "head")
        with eng.connect() as conn:
            assert EXPECTED_TABLES <= _tables(conn)
            assert _versions(conn) == _heads()
            assert conn.execute(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'vector'")).scalar() == 1

        _alembic(url, "downgrade", "base")
        with eng.connect() as conn:
            assert not (_tables(conn) & EXPECTED_TABLES), "downgrade base drops every table"
            assert _versions(conn) == set()
            types = set(conn.execute(sa.text("SELECT typname FROM pg_type WHERE typtype = 'e'")).scalars())
            assert not types & {"document_status", "document_publication_status"}, "enum types dropped too"

        _alembic(url, "upgrade", "head")
        with eng.connect() as conn:
            assert EXPECTED_TABLES <= _tables(conn)
            assert _versions(conn) == _heads()
            assert _schema_diffs(conn) == []
            # the comparison does see a drift (guards the HNSW filter against hiding everything)
            conn.execute(sa.text("ALTER TABLE documents ADD COLUMN drift integer"))
            conn.execute(sa.text("DROP INDEX ix_document_chunks_tsv"))
            kinds = sorted(d[0] for d in _schema_diffs(conn) if isinstance(d, tuple))
            assert kinds == ["add_index", "remove_column"], kinds
            conn.rollback()
    finally:
        eng.dispose()


def test_0003_backfills_grades_and_last_seen(scratch_db: tuple[str, str]) -> None:
    """Rows written before 0003: relevant candidates get grade 1, the others stay NULL (not judged); a
    dataset version's last_seen_at is the later of its creation and its latest run's start."""
    url, sqlalchemy_url = scratch_db
    eng = sa.create_engine(sqlalchemy_url)
    try:
        _alembic(url, "downgrade", "base")
        _alembic(url, "upgrade", "0002")
        with eng.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO knowledge_bases (id, name, text_search, chunk_size, chunk_overlap, chunk_count, "
                "avg_chunk_length) VALUES ('00000000-0000-0000-0000-00000000000b', 'kb', 'simple', 500, 80, 0, 0)"))
            conn.execute(sa.text(
                "INSERT INTO retrieval_evaluation_datasets (id, name, knowledge_base_name, content_hash, case_count, "
                "cases, created_at) VALUES "
                "('00000000-0000-0000-0000-0000000000d1', 'd', 'kb', 'h1', 0, '[]', '2026-01-01T00:00:00Z'), "
                "('00000000-0000-0000-0000-0000000000d2', 'd', 'kb', 'h2', 0, '[]', '2026-02-01T00:00:00Z')"))
            conn.execute(sa.text(
                "INSERT INTO retrieval_evaluation_runs (id, dataset_id, knowledge_base_id, strategy_version, "
                "params_hash, strategy_params, status, is_current, case_count, candidate_count, started_at) VALUES "
                "('00000000-0000-0000-0000-0000000000a1', '00000000-0000-0000-0000-0000000000d1', "
                "'00000000-0000-0000-0000-00000000000b', 's', 'p', '{}', 'succeeded', true, 1, 2, "
                "'2026-03-01T00:00:00Z')"))
            conn.execute(sa.text(
                "INSERT INTO retrieval_evaluation_candidates (evaluation_run_id, case_id, chunk_id, document_id, "
                "document_name, rank, final_score, is_relevant, is_selected, strategy_version) VALUES "
                "('00000000-0000-0000-0000-0000000000a1', 'c', gen_random_uuid(), gen_random_uuid(), 'x', 1, 1, "
                "true, true, 's'), "
                "('00000000-0000-0000-0000-0000000000a1', 'c', gen_random_uuid(), gen_random_uuid(), 'y', 2, 0, "
                "false, true, 's')"))
        _alembic(url, "upgrade", "head")
        with eng.connect() as conn:
            grades = conn.execute(sa.text("SELECT rank, is_relevant, relevance_grade FROM "
                                          "retrieval_evaluation_candidates ORDER BY rank")).all()
            seen = dict(conn.execute(sa.text("SELECT content_hash, last_seen_at::date::text FROM "
                                             "retrieval_evaluation_datasets")).all())
            with pytest.raises(sa.exc.IntegrityError):
                conn.execute(sa.text("UPDATE retrieval_evaluation_candidates SET relevance_grade = 11"))
        assert [tuple(g) for g in grades] == [(1, True, 1), (2, False, None)]
        assert seen == {"h1": "2026-03-01", "h2": "2026-02-01"}
    finally:
        eng.dispose()


def test_0004_adds_the_knowledge_base_version_of_runs(scratch_db: tuple[str, str]) -> None:
    """A database that already has runs: they keep working with version NULL (unknown); only a 64-hex version is
    accepted; downgrading to 0003 drops the column again."""
    url, sqlalchemy_url = scratch_db
    eng = sa.create_engine(sqlalchemy_url)
    run = "'00000000-0000-0000-0000-0000000000a4'"
    try:
        _alembic(url, "downgrade", "base")
        _alembic(url, "upgrade", "0003")
        with eng.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO knowledge_bases (id, name, text_search, chunk_size, chunk_overlap, chunk_count, "
                "avg_chunk_length) VALUES ('00000000-0000-0000-0000-00000000000b', 'kb', 'simple', 500, 80, 0, 0)"))
            conn.execute(sa.text(
                "INSERT INTO retrieval_evaluation_datasets (id, name, knowledge_base_name, content_hash, case_count, "
                "cases) VALUES ('00000000-0000-0000-0000-0000000000d1', 'd', 'kb', 'h1', 0, '[]')"))
            conn.execute(sa.text(
                "INSERT INTO retrieval_evaluation_runs (id, dataset_id, knowledge_base_id, strategy_version, "
                f"params_hash, strategy_params, status, is_current, case_count, candidate_count) VALUES ({run}, "
                "'00000000-0000-0000-0000-0000000000d1', '00000000-0000-0000-0000-00000000000b', 's', 'p', '{}', "
                "'succeeded', true, 1, 2)"))
        _alembic(url, "upgrade", "head")
        with eng.connect() as conn:
            assert conn.execute(sa.text("SELECT knowledge_base_version FROM retrieval_evaluation_runs")).all() == [
                (None,)]
            with pytest.raises(sa.exc.IntegrityError):
                conn.execute(sa.text(
                    f"UPDATE retrieval_evaluation_runs SET knowledge_base_version = 'v1' WHERE id = {run}"))
            conn.rollback()
            conn.execute(sa.text(
                f"UPDATE retrieval_evaluation_runs SET knowledge_base_version = repeat('ab', 32) WHERE id = {run}"))
            conn.commit()
        _alembic(url, "downgrade", "0003")
        with eng.connect() as conn:
            columns = conn.execute(sa.text(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'retrieval_evaluation_runs'"
            )).scalars().all()
        assert "knowledge_base_version" not in columns and "params_hash" in columns
        _alembic(url, "upgrade", "head")
    finally:
        eng.dispose()


def _schema_diffs(conn: sa.Connection) -> list:
    ctx = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": False})

    def runtime_index(diff) -> bool:
        obj = diff[1] if isinstance(diff, tuple) else None
        return isinstance(obj, sa.Index) and (obj.name or "").startswith(HNSW_PREFIX)

    return [d for d in compare_metadata(ctx, Base.metadata) if not runtime_index(d)]


def test_models_match_the_migrated_schema(engine) -> None:
    """Autogenerate finds nothing to do: the SQLAlchemy models and the migrations agree."""
    with engine.connect() as conn:
        diffs = _schema_diffs(conn)
    assert diffs == [], "models and migrations differ (write a migration):\n" + "\n".join(map(repr, diffs))


def test_the_schema_has_one_column_per_metric() -> None:
    """storage imports no stage, so its metric columns are spelled out; they must be the metrics module's."""
    from rag_pipeline.evaluation.metrics import METRIC_NAMES
    from rag_pipeline.storage.evaluation_schema import METRIC_COLUMNS

    assert METRIC_COLUMNS == METRIC_NAMES
