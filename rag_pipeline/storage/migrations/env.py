"""Alembic environment: the URL is RAG_DATABASE_URL or the embedded server's ``rag`` database."""

from alembic import context

from rag_pipeline.storage import answer_tables as answer_models  # noqa: F401 - registers the answer tables
from rag_pipeline.storage import evaluation_tables as eval_models  # noqa: F401 - registers the evaluation tables
from rag_pipeline.storage.tables import Base

target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
        return
    from rag_pipeline.storage.engine import database_url, get_engine  # noqa: PLC0415 - the engine imports this env

    engine = get_engine(database_url(), migrate=False)
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `alembic upgrade head` against a database")
run_migrations_online()
