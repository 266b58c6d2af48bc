"""One line instead of a traceback when Dagster's storage is not set up (``rag-pipeline db start`` not run yet,
or the database is down): ``dagster.yaml``'s storage is :class:`RagPostgresStorage`, which checks first."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from dagster_postgres import DagsterPostgresStorage

ENV_VAR = "RAG_DAGSTER_PG_URL"
CONNECT_TIMEOUT_S = 3
HINT = "run `rag-pipeline db start` first, from the repo root (it writes .env with RAG_DAGSTER_PG_URL)"
NOT_CONFIGURED = f"rag_pipeline: Dagster's storage is not configured: {HINT}"


class DagsterStorageNotConfigured(RuntimeError):  # noqa: N818 - names the state to fix
    """Dagster's storage URL is missing or its database does not answer."""


def _connect_args(url: str) -> dict[str, Any]:
    import sqlalchemy as sa  # noqa: PLC0415 - the storage check runs before Dagster loads; keep its import cheap

    parsed = sa.engine.make_url(url)
    args: dict[str, Any] = {
        k: v for k, v in parsed.translate_connect_args(username="user", database="dbname").items() if v is not None
    }
    args.update({k: v if isinstance(v, str) else v[-1] for k, v in parsed.query.items()})
    return args


def _where(args: Mapping[str, Any]) -> str:
    host = str(args.get("host") or "localhost")
    port = args.get("port")
    return f"{host}:{port}" if port and not host.startswith("/") else host


def _same_database(args: Mapping[str, Any], kb_url: str | None) -> bool:
    try:
        kb = _connect_args(kb_url) if kb_url else None
    except Exception:  # noqa: BLE001 - a malformed RAG_DATABASE_URL is reported where it is used
        return False
    keys = ("host", "port", "dbname")
    return kb is not None and tuple(str(args.get(k) or "") for k in keys) == tuple(str(kb.get(k) or "") for k in keys)


def storage_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """The one-line problem with Dagster's storage, or None when it is reachable."""
    environ = os.environ if environ is None else environ
    url = environ.get(ENV_VAR)
    if not url:
        return NOT_CONFIGURED
    from rag_pipeline.settings import project_root  # noqa: PLC0415
    from rag_pipeline.storage import embedded_server  # noqa: PLC0415 - only once a URL is configured

    stale = embedded_server.stale_env_problem(environ, project_root())
    if stale:  # a .env of another data directory: say so, not "no socket in <the other one>"
        return f"rag_pipeline: {stale}"
    try:
        args = _connect_args(url)
    except Exception:  # noqa: BLE001 - a malformed URL: let dagster-postgres report it
        return None
    if _same_database(args, environ.get("RAG_DATABASE_URL")):
        return (f"rag_pipeline: {ENV_VAR} names the knowledge-base database of RAG_DATABASE_URL: Dagster's storage "
                "needs a database of its own (unset it and run `rag-pipeline db start`: Dagster then uses the "
                "database `dagster` on the same server)")
    host = str(args.get("host") or "")
    where = _where(args)
    if host.startswith("/") and not os.path.exists(os.path.join(host, f".s.PGSQL.{args.get('port') or 5432}")):
        return f"rag_pipeline: Dagster's storage database is not running (no socket in {host}): {HINT}"
    try:
        import psycopg2  # noqa: PLC0415 - dagster-postgres's driver, only when checking

        psycopg2.connect(connect_timeout=CONNECT_TIMEOUT_S, **args).close()
    except ImportError:  # dagster-postgres would fail to import anyway
        return None
    except Exception as exc:  # noqa: BLE001 - any connection failure gets the same hint
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if args.get("password"):
            reason = reason.replace(str(args["password"]), "***")
        return f"rag_pipeline: Dagster's storage database at {where} is not reachable ({reason}): {HINT}"
    return None


def _under_dagster_cli() -> bool:
    name = os.path.basename(sys.argv[0] if sys.argv else "")
    return name.startswith(("dagster", "dg"))


_reachable: set[str] = set()  # URLs already checked in this process (Dagster reads dagster.yaml twice)


def check_dagster_storage() -> None:
    url = os.environ.get(ENV_VAR, "")
    if url in _reachable:
        return
    problem = storage_problem()
    if problem is None:
        _reachable.add(url)
        return
    if _under_dagster_cli():
        print(problem, file=sys.stderr, flush=True)
        raise SystemExit(2)
    raise DagsterStorageNotConfigured(problem)


DUPLICATE_OBJECT = "42710"
"""PostgreSQL's ``duplicate_object``: ``type "runs" already exists`` when another process created Dagster's table
between this one's two catalog checks (dagster-postgres retries ``duplicate_table`` and unique violations only)."""
CREATE_ATTEMPTS = 3


class RagPostgresStorage(DagsterPostgresStorage):
    """Dagster's PostgreSQL storage; ``dagster.yaml``'s ``storage: custom`` so the storage is checked first, and
    its tables created safely by processes that start together on a new database (a daemon and its workers)."""

    @classmethod
    def config_type(cls) -> Any:
        # Called by Dagster before it resolves the config (postgres_url from the environment) and connects.
        check_dagster_storage()
        return super().config_type()

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        import sqlalchemy as sa  # noqa: PLC0415 - the storage check above runs before Dagster loads

        for _ in range(CREATE_ATTEMPTS - 1):
            try:
                return super().from_config_value(inst_data, config_value)
            except sa.exc.ProgrammingError as exc:  # the tables now exist: the next attempt finds them
                if getattr(exc.orig, "pgcode", None) != DUPLICATE_OBJECT:
                    raise
        return super().from_config_value(inst_data, config_value)
