"""deploy/celery/README.md's non-superuser role: a role that owns its database (a superuser created only the
``vector`` extension) migrates it, ingests and evaluates — the run's candidate partition needs the table's owner,
not a superuser."""

from __future__ import annotations

import secrets
import uuid

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline.service import evaluations
from rag_pipeline.storage.engine import get_engine
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, tiny_cases, write_dataset
from rag_pipeline_tests.reliability_helpers import scratch_database


def test_a_role_owning_its_database_migrates_ingests_and_evaluates_without_superuser(engine, tmp_path):
    role, password = f"rag_owner_{uuid.uuid4().hex[:8]}", secrets.token_urlsafe(16)
    with scratch_database("rag_role") as (_, url):
        superuser = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        try:
            with superuser.connect() as conn:
                conn.execute(sa.text(f"CREATE ROLE {role} LOGIN PASSWORD '{password}' NOSUPERUSER NOCREATEDB "
                                     "NOCREATEROLE"))
                conn.execute(sa.text(f'ALTER DATABASE "{make_url(url).database}" OWNER TO {role}'))
                conn.execute(sa.text("CREATE EXTENSION vector"))
            as_role = make_url(url).set(username=role, password=password).render_as_string(hide_password=False)
            owned = get_engine(as_role)  # migrates as the role
            try:
                with owned.connect() as conn:
                    assert conn.execute(sa.text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
                                        ).scalar_one() is False
                chunks = ingest_tiny_kb(owned, "role-kb", tmp_path / "docs")
                path = write_dataset(tmp_path / "ds.json", "role-kb", tiny_cases(chunks), name="role")
                plan = evaluations.plan_evaluation(owned, path, ("keyword-v1", "vector-v1"), knowledge_base="role-kb")
                evaluations.evaluate(owned, plan)
                with owned.connect() as conn:
                    runs = conn.execute(sa.text("SELECT strategy_version, status, candidate_count FROM "
                                                "retrieval_evaluation_runs ORDER BY strategy_version")).all()
                    others = conn.execute(sa.text(
                        "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tableowner <> current_user"
                    )).scalar_one()
            finally:
                owned.dispose()
            assert [(r.strategy_version, r.status) for r in runs] == [("keyword-v1", "succeeded"),
                                                                      ("vector-v1", "succeeded")]
            assert all(r.candidate_count > 0 for r in runs)
            assert others == 0, "every table (the candidate partitions too) is the role's"
            assert get_strategy("vector-v1").vector_candidate_k, "a strategy reading pgvector ran"
        finally:
            superuser.dispose()
            server = sa.create_engine(make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT")
            with server.connect() as conn:  # the role goes with its database
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))
                conn.execute(sa.text(f"DROP ROLE IF EXISTS {role}"))
            server.dispose()
