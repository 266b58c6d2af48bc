"""Where things live: project root, embedded Postgres data dir, datasets folder, database URLs.

Every command honours these environment variables:

- ``RAG_DATABASE_URL``  any PostgreSQL with pgvector (SQLAlchemy URL). Unset: the embedded server.
- ``RAG_PGDATA``        data directory of the embedded server (default ``<project>/.rag_pipeline/pgdata``).
- ``RAG_DATASETS_DIR``  folder the dataset sensor watches (default ``<project>/datasets``).
- ``RAG_DAGSTER_PG_URL`` Dagster's own instance storage (written to ``.env`` by ``rag-pipeline db start``).

Tuning (read where they apply):

- ``RAG_EVAL_READERS``      parallel read connections of an evaluation (default 2; :mod:`snapshot_readers`).
- ``RAG_EMBED_THREADS``     BLAS threads of the USE encoder (default: every core; :mod:`embedding`).
- ``RAG_PG_SHARED_BUFFERS`` ``shared_buffers`` of the embedded server (default RAM/4, at most 1 GB;
  :mod:`embedded_pg`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

KB_DATABASE = "rag"
DAGSTER_DATABASE = "dagster"


def project_root() -> Path:
    """The folder holding ``pyproject.toml`` (the repo root), else the current directory."""
    env = os.environ.get("RAG_PROJECT_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").exists() and (parent / "rag_pipeline").is_dir():
            return parent
    return Path.cwd().resolve()


def pgdata_dir() -> Path:
    env = os.environ.get("RAG_PGDATA")
    return Path(env).expanduser().resolve() if env else project_root() / ".rag_pipeline" / "pgdata"


def datasets_dir() -> Path:
    env = os.environ.get("RAG_DATASETS_DIR")
    return Path(env).expanduser().resolve() if env else project_root() / "datasets"


def reports_dir() -> Path:
    return project_root() / "reports"


# The password runs to the *last* '@' (greedy): an unencoded '@' in a password must not leave its tail visible.
_PASSWORD = re.compile(r"(?P<head>[a-z0-9+]+://[^:/@?]*:)(?P<pw>.*)(?P<tail>@)", re.IGNORECASE)
_PASSWORD_PARAM = re.compile(r"(?P<head>[?&]password=)(?P<pw>[^&]*)", re.IGNORECASE)


def mask_url(url: str) -> str:
    """Hide the password of a database URL (for logs, metadata and error messages)."""
    masked = _PASSWORD.sub(lambda m: m["head"] + ("***" if m["pw"] else "") + m["tail"], str(url))
    return _PASSWORD_PARAM.sub(lambda m: m["head"] + "***", masked)


def mask_secrets(text: str) -> str:
    """Mask every database URL password inside a free-form message."""
    return re.sub(r"[a-z0-9+]+://\S+", lambda m: mask_url(m.group(0)), str(text), flags=re.IGNORECASE)
