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

from rag_pipeline.contracts.metrics import METRIC_NAMES
from rag_pipeline.storage import answer_tables as answer_models  # registers the answer tables
from rag_pipeline.storage import evaluation_tables as eval_models  # noqa: F401 - registers the evaluation tables
from rag_pipeline.storage.engine import alembic_config
from rag_pipeline.storage.evaluation_tables import CANDIDATE_PARTITION_PREFIX
from rag_pipeline.storage.tables import Base
from rag_pipeline_tests.reliability_helpers import scratch_database

ROOT = Path(__file__).resolve().parents[2]
ALEMBIC = Path(sys.executable).parent / "alembic"

EXPECTED_TABLES = {
    "knowledge_bases", "documents", "document_chunks", "chunk_embeddings", "embedding_models", "chunk_terms",
    "knowledge_base_term_stats", "retrieval_evaluation_datasets", "retrieval_evaluation_runs",
    "retrieval_evaluation_candidates", "retrieval_evaluation_case_results", "retrieval_strategies",
    "retrieval_evaluation_candidate_rows", "question_embeddings", "retrieval_comparison_runs", "answer_runs",
    "answer_case_results",
}
"""Tables, and the view ``retrieval_evaluation_candidates`` (the seed's name over the partitioned storage)."""
HNSW_PREFIX = "ix_emb_hnsw_"  # a knowledge base × model vector index (created at ingestion)


def _heads() -> set[str]:
    return set(ScriptDirectory.from_config(alembic_config("postgresql+psycopg:///unused")).get_heads())


def _tables(conn: sa.Connection) -> set[str]:
    inspector = sa.inspect(conn)
    return set(inspector.get_table_names()) | set(inspector.get_view_names())


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
        assert tables >= EXPECTED_TABLES, f"missing: {EXPECTED_TABLES - tables}"
        assert conn.execute(sa.text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).scalar()
        # every model's table was created by a migration
        assert set(Base.metadata.tables) <= tables


@pytest.fixture(scope="module")
def scratch_db(engine):  # the session server must be up
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
            assert _tables(conn) >= EXPECTED_TABLES
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
            assert _tables(conn) >= EXPECTED_TABLES
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
        _alembic(url, "upgrade", "0003")
        with eng.connect() as conn:
            grades = conn.execute(sa.text("SELECT rank, is_relevant, relevance_grade FROM "
                                          "retrieval_evaluation_candidates ORDER BY rank")).all()
            seen = dict(conn.execute(sa.text("SELECT content_hash, last_seen_at::date::text FROM "
                                             "retrieval_evaluation_datasets")).all())
            with pytest.raises(sa.exc.IntegrityError):
                conn.execute(sa.text("UPDATE retrieval_evaluation_candidates SET relevance_grade = 11"))  # at 0003
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


SEED_FIELDS = ("evaluation_run_id", "case_id", "chunk_id", "document_id", "document_name", "rank", "vector_score",
               "vector_rank", "keyword_score", "keyword_rank", "rerank_score", "final_score", "is_relevant",
               "is_selected", "strategy_version", "relevance_grade")


def test_0005_moves_stored_runs_into_partitions(scratch_db: tuple[str, str]) -> None:
    """A database at 0003 with two stored runs: upgraded to head (0005), every candidate reads back through the seed's
    ``retrieval_evaluation_candidates`` with the same §4.1 fields, each run's rows sit in its own partition,
    deleting a run drops its partition, and a downgrade restores the old table with the same rows."""
    url, sqlalchemy_url = scratch_db
    eng = sa.create_engine(sqlalchemy_url)
    query = sa.text(f"SELECT {', '.join(SEED_FIELDS)} FROM retrieval_evaluation_candidates "
                    "ORDER BY evaluation_run_id, case_id, rank")
    try:
        _alembic(url, "downgrade", "base")
        _alembic(url, "upgrade", "0003")
        with eng.begin() as conn:
            _stored_runs_at_0003(conn)
            before = [tuple(r) for r in conn.execute(query)]
        assert len(before) == 6
        _alembic(url, "upgrade", "head")
        with eng.begin() as conn:
            after = [tuple(r) for r in conn.execute(query)]
            parts = conn.execute(sa.text(
                "SELECT c.relname, (SELECT count(*) FROM retrieval_evaluation_candidate_rows r "
                "WHERE r.tableoid = c.oid) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'retrieval_evaluation_candidate_rows'::regclass ORDER BY 1")).all()
            assert after == before
            assert [tuple(p) for p in parts] == [(CANDIDATE_PARTITION_PREFIX + "0" * 30 + "a1", 4),
                                                  (CANDIDATE_PARTITION_PREFIX + "0" * 30 + "a2", 2)]
        _alembic(url, "downgrade", "0003")
        with eng.begin() as conn:
            assert [tuple(r) for r in conn.execute(query)] == before
        _alembic(url, "upgrade", "head")
        with eng.begin() as conn:
            conn.execute(sa.text("DELETE FROM retrieval_evaluation_runs WHERE id = :r"),
                         {"r": "00000000-0000-0000-0000-0000000000a2"})
            left = conn.execute(sa.text(
                "SELECT count(*) FROM pg_class WHERE relname LIKE :p AND relkind = 'r'"),
                {"p": CANDIDATE_PARTITION_PREFIX + "%"}).scalar()
            assert left == 1, "deleting a run drops its partition"
            assert [tuple(r) for r in conn.execute(query)] == before[:4]
    finally:
        eng.dispose()


def _stored_runs_at_0003(conn: sa.Connection) -> None:
    """Two runs with case results and candidates, written the way 0003's code wrote them (a real chunk for one)."""
    kb, doc, chunk = ("00000000-0000-0000-0000-00000000000b", "00000000-0000-0000-0000-0000000000dd",
                      "00000000-0000-0000-0000-0000000000cc")
    conn.execute(sa.text(
        "INSERT INTO knowledge_bases (id, name, text_search, chunk_size, chunk_overlap, chunk_count, "
        "avg_chunk_length) VALUES (:kb, 'kb', 'simple', 500, 80, 0, 0)"), {"kb": kb})
    conn.execute(sa.text(
        "INSERT INTO documents (id, knowledge_base_id, original_name, content, content_hash, status, "
        "publication_status, is_deleted) VALUES (:d, :kb, 'doc.md', 'text', 'h', 'READY', 'PUBLISHED', false)"),
        {"d": doc, "kb": kb})
    conn.execute(sa.text(
        "INSERT INTO document_chunks (id, knowledge_base_id, document_id, ordinal, content, content_hash, "
        "char_start, char_end, content_tsvector, token_count, is_current) "
        "VALUES (:c, :kb, :d, 0, 'text', 'h', 0, 4, 'text', 1, true)"),
        {"c": chunk, "kb": kb, "d": doc})
    conn.execute(sa.text(
        "INSERT INTO retrieval_evaluation_datasets (id, name, knowledge_base_name, content_hash, case_count, cases) "
        "VALUES ('00000000-0000-0000-0000-0000000000d1', 'd', 'kb', 'h1', 2, '[]')"))
    for run, version in (("a1", "s-v1"), ("a2", "s-v2")):
        run_id = "00000000-0000-0000-0000-0000000000" + run
        conn.execute(sa.text(
            "INSERT INTO retrieval_evaluation_runs (id, dataset_id, knowledge_base_id, strategy_version, "
            "params_hash, strategy_params, status, is_current, case_count, candidate_count) VALUES "
            "(:r, '00000000-0000-0000-0000-0000000000d1', :kb, :v, 'p', '{}', 'succeeded', true, 2, 4)"),
            {"r": run_id, "kb": kb, "v": version})
        cases = ("c1", "c2") if run == "a1" else ("c1",)
        for i, case in enumerate(cases):
            conn.execute(sa.text(
                f"INSERT INTO retrieval_evaluation_case_results (evaluation_run_id, case_id, case_index, question, "
                f"k, relevant_chunk_ids, retrieved_chunk_ids, {', '.join(METRIC_NAMES)}) VALUES (:r, :c, :i, 'q', "
                f"1, '[]', '[]', {', '.join('0' for _ in METRIC_NAMES)})"), {"r": run_id, "c": case, "i": i})
            conn.execute(sa.text(
                "INSERT INTO retrieval_evaluation_candidates (evaluation_run_id, case_id, chunk_id, document_id, "
                "document_name, rank, vector_score, vector_rank, keyword_score, keyword_rank, final_score, "
                "is_relevant, is_selected, strategy_version, relevance_grade) VALUES "
                "(:r, :c, :chunk, :doc, 'doc.md', 1, 0.5, 1, NULL, NULL, 0.25, true, true, :v, 2), "
                "(:r, :c, :chunk, :doc, 'doc.md', 2, NULL, NULL, 3.5, 1, 0.125, false, false, :v, NULL)"),
                {"r": run_id, "c": case, "chunk": chunk, "doc": doc, "v": version})


def _schema_diffs(conn: sa.Connection) -> list:
    ctx = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": False})

    def runtime_index(diff) -> bool:
        """An index or table created at run time: a model's HNSW index, a run's candidate partition."""
        obj = diff[1] if isinstance(diff, tuple) else None
        if isinstance(obj, sa.Table) and diff[0] == "remove_table":
            return obj.name.startswith(CANDIDATE_PARTITION_PREFIX)
        return isinstance(obj, sa.Index) and (obj.name or "").startswith(HNSW_PREFIX)

    return [d for d in compare_metadata(ctx, Base.metadata) if not runtime_index(d)]


def test_models_match_the_migrated_schema(engine) -> None:
    """Autogenerate finds nothing to do: the SQLAlchemy models and the migrations agree."""
    with engine.connect() as conn:
        diffs = _schema_diffs(conn)
    assert diffs == [], "models and migrations differ (write a migration):\n" + "\n".join(map(repr, diffs))


def test_the_schema_has_one_column_per_metric() -> None:
    """The runs and the case results (retrieval and answers) have a column per metric of their metric list, in its
    order."""
    from rag_pipeline.contracts.answers import ANSWER_METRIC_NAMES
    from rag_pipeline.evaluation.metrics import METRIC_NAMES as EVALUATION_METRICS
    from rag_pipeline.storage.evaluation_tables import RetrievalEvaluationCaseResult, RetrievalEvaluationRun

    assert EVALUATION_METRICS == METRIC_NAMES
    for table in (RetrievalEvaluationRun.__table__, RetrievalEvaluationCaseResult.__table__):
        assert [c.name for c in table.columns if c.name in METRIC_NAMES] == list(METRIC_NAMES)
    for table in (answer_models.AnswerRunRow.__table__, answer_models.AnswerCaseResultRow.__table__):
        assert tuple(c.name for c in table.columns if c.name in ANSWER_METRIC_NAMES) == ANSWER_METRIC_NAMES


def test_a_vector_is_stored_in_its_row_unless_it_is_too_large_for_a_page(engine, demo_kb) -> None:
    """``toast_tuple_target`` (0016): the demo's 512-dimensional vectors are in their rows (with the
    default 2 KB target the 512-d ones were in the TOAST table); a 3,072-dimensional one still goes out of line."""
    stored = sa.text("SELECT vector_dims(e.embedding) AS dims, pg_column_toast_chunk_id(e.embedding) IS NOT NULL AS "
                     "out_of_line FROM chunk_embeddings e JOIN knowledge_bases k ON k.id = e.knowledge_base_id "
                     "WHERE k.name = :kb")
    with engine.connect() as conn:
        rows = conn.execute(stored, {"kb": demo_kb}).all()
    assert 512 in {r.dims for r in rows}
    assert not [r for r in rows if r.out_of_line]
    with engine.connect() as conn:  # rolled back
        conn.execute(sa.text("INSERT INTO embedding_models (name, dimension, backend) "
                             "VALUES ('toast-test-3072', 3072, 'toast-test')"))
        conn.execute(sa.text(
            "INSERT INTO chunk_embeddings (chunk_id, model, knowledge_base_id, embedding) "
            "SELECT c.id, 'toast-test-3072', c.knowledge_base_id, "
            "       (SELECT array_agg(i::real / 3072) FROM generate_series(1, 3072) AS i)::vector "
            "FROM document_chunks c JOIN knowledge_bases k ON k.id = c.knowledge_base_id "
            "WHERE k.name = :kb LIMIT 1"), {"kb": demo_kb})
        out_of_line = conn.execute(sa.text(
            "SELECT pg_column_toast_chunk_id(embedding) IS NOT NULL FROM chunk_embeddings "
            "WHERE model = 'toast-test-3072'")).scalar_one()
        conn.rollback()
    assert out_of_line, "a vector larger than a page's row goes to the TOAST table"
