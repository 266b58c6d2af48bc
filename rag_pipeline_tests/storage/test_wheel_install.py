"""The built wheel works without the repository: its contents, and a fresh database migrated by the installed CLI.

The wheel is built (``pip wheel --no-build-isolation``, no download) from a copy of the packaging inputs, so
no ``build/`` or ``*.egg-info`` is written into the working tree. It is installed with ``--no-deps`` into a
temporary venv that sees the project's dependencies through a ``.pth`` line naming ``.venv``'s site-packages:
``python -m venv --system-site-packages`` from ``.venv``'s python would expose the *base* interpreter's
site-packages, not ``.venv``'s. A ``.pth`` path line is appended to ``sys.path`` without processing the
``.pth`` files inside it, so ``.venv``'s editable-install finder for ``rag_pipeline`` is not loaded and the
temp venv's own copy is imported. The commands then run from an empty directory on a new empty database.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from rag_pipeline.storage import answer_tables as answer_models  # noqa: F401 - registers the answer tables
from rag_pipeline.storage import evaluation_tables as eval_models  # noqa: F401 - registers the evaluation tables
from rag_pipeline.storage.engine import alembic_config
from rag_pipeline.storage.tables import Base
from rag_pipeline_tests.reliability_helpers import scratch_database

ROOT = Path(__file__).resolve().parents[2]
# what setuptools reads to build the wheel (copied, so the build does not write into the working tree)
PACKAGING_INPUTS = ("pyproject.toml", "README.md", "setup.cfg", "setup.py", "MANIFEST.in", "LICENSE")

# printed as JSON by the temp venv's python, run from an empty directory
PROBE = """
import json, sys
import rag_pipeline, rag_pipeline.cli
from rag_pipeline.retrieval.strategies import PACKAGED_STRATEGIES_FILE, load_registry
from rag_pipeline.storage.engine import MIGRATIONS_DIR
print(json.dumps({
    "package": rag_pipeline.__file__, "cli": rag_pipeline.cli.__file__, "migrations": str(MIGRATIONS_DIR),
    "strategies_file": str(PACKAGED_STRATEGIES_FILE), "strategies": len(load_registry()),
    "modules": sorted(m.__file__ for m in list(sys.modules.values())
                      if m.__name__.split(".")[0].startswith("rag_pipeline") and getattr(m, "__file__", None)),
}))
"""


@pytest.fixture(scope="module")
def wheel_src(tmp_path_factory) -> Path:
    """A snapshot of what the wheel is built from (the working tree may change meanwhile)."""
    src = tmp_path_factory.mktemp("wheel_src")
    for name in PACKAGING_INPUTS:
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "rag_pipeline", src / "rag_pipeline", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return src


@pytest.fixture(scope="module")
def wheel(wheel_src: Path, tmp_path_factory) -> Path:
    src = wheel_src
    out = tmp_path_factory.mktemp("wheel_dist")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    wheels = list(out.glob("rag_pipeline_eval-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.mark.slow  # builds the wheel with pip in a subprocess
def test_wheel_ships_the_whole_package_with_migrations_and_strategies_but_not_the_tests(wheel: Path,
                                                                                        wheel_src: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    migrations = wheel_src / "rag_pipeline" / "storage" / "migrations"
    versions = {f"rag_pipeline/storage/migrations/versions/{p.name}" for p in (migrations / "versions").glob("*.py")}
    assert versions, f"no migration versions found in {migrations / 'versions'}"
    expected = versions | {"rag_pipeline/storage/migrations/script.py.mako", "rag_pipeline/storage/migrations/env.py",
                           "rag_pipeline/retrieval/strategies.yaml", "rag_pipeline/defs/workers/dagster.yaml"}
    # every module of the source tree, also those of the namespace packages (directories without __init__.py)
    expected |= {p.relative_to(wheel_src).as_posix() for p in (wheel_src / "rag_pipeline").rglob("*.py")}
    assert not expected - names, f"missing from the wheel: {sorted(expected - names)}"
    assert not [n for n in names if n.startswith("rag_pipeline_tests")], "the tests must not be shipped"
    entry_points = archive.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "rag-pipeline = rag_pipeline.cli:main" in entry_points


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory) -> Path:
    """A temp venv with the wheel installed (--no-deps), the project's dependencies visible via a .pth line."""
    venv = tmp_path_factory.mktemp("wheel_venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # pip of .venv installs into the temp venv (it has no pip of its own). Before the .pth line exists: the
    # editable rag-pipeline of .venv must not look like an installation pip should replace.
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
         "--disable-pip-version-check", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"pip install failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    assert (site / "rag_pipeline" / "__init__.py").exists()
    (site / "_project_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n", encoding="utf-8")
    return venv


@pytest.fixture
def fresh_db(engine):  # the session server must be up
    """A fresh, empty database on the test server (dropped afterwards): (libpq URL, SQLAlchemy URL)."""
    with scratch_database("rag_wheeltest") as urls:
        yield urls


@pytest.mark.slow  # builds the wheel and installs it into a new venv
def test_installed_wheel_migrates_a_fresh_database_from_an_empty_directory(installed: Path, fresh_db, tmp_path):
    url, sqlalchemy_url = fresh_db
    workdir = tmp_path / "empty"
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "RAG_PROJECT_ROOT", "RAG_STRATEGIES_FILE", "RAG_DAGSTER_PG_URL",
                        "DAGSTER_HOME", "VIRTUAL_ENV")}
    env["RAG_DATABASE_URL"] = url
    site = Path(subprocess.run([str(installed / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip()).resolve()

    probe = subprocess.run([str(installed / "bin" / "python"), "-c", PROBE], cwd=workdir, env=env,
                           capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    found = json.loads(probe.stdout)
    for key in ("package", "cli", "migrations", "strategies_file"):
        assert Path(found[key]).resolve().is_relative_to(site), f"{key} not from the installed wheel: {found[key]}"
    outside = [m for m in found["modules"] if not Path(m).resolve().is_relative_to(site)]
    assert not outside, f"modules imported from outside the temp venv: {outside}"
    assert found["strategies"] >= 1, "the packaged strategies.yaml loads"

    # `rag-pipeline db start` (the README's first command) migrates the database and writes .env into the
    # project root, which for an installed package is the current directory
    proc = subprocess.run([str(installed / "bin" / "rag-pipeline"), "db", "start"], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"rag-pipeline db start failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "database ready" in proc.stdout
    assert (workdir / ".env").exists()

    head = ScriptDirectory.from_config(alembic_config("postgresql+psycopg:///unused")).get_current_head()
    eng = sa.create_engine(sqlalchemy_url)
    try:
        with eng.connect() as conn:
            versions = set(conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars())
            tables = set(sa.inspect(conn).get_table_names())
            vector = conn.execute(sa.text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).scalar()
    finally:
        eng.dispose()
    assert versions == {head}, f"alembic_version {versions}, head of the source tree {head}"
    assert set(Base.metadata.tables) <= tables, f"missing tables: {set(Base.metadata.tables) - tables}"
    assert vector, "the vector extension is created by the first migration"

    # alembic.ini's `script_location = rag_pipeline.storage:migrations` resolves to the installed package too
    ini_dir = tmp_path / "ini"
    ini_dir.mkdir()
    shutil.copy2(ROOT / "alembic.ini", ini_dir / "alembic.ini")
    current = subprocess.run([str(installed / "bin" / "python"), "-m", "alembic", "-c", str(ini_dir / "alembic.ini"),
                              "current"], cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    assert current.returncode == 0, current.stderr[-3000:]
    assert f"{head} (head)" in current.stdout


@pytest.mark.slow  # builds the wheel, then a Dagster run in a subprocess of the temp venv
def test_installed_wheel_runs_an_evaluation_from_an_empty_directory(installed: Path, engine, tmp_path):
    """What a Celery worker has: the installed package, its environment, a DAGSTER_HOME with the instance
    configuration — no checkout, no datasets/ folder, no RAG_PROJECT_ROOT. The dataset comes from the database
    (the HTTP API passes ``dataset_id``); the run succeeds and names the process that executed it."""
    import socket

    import dagster as dg

    from rag_pipeline.service import datasets as dataset_service
    from rag_pipeline.storage.engine import dagster_database_url
    from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, tiny_cases, write_dataset

    chunks = ingest_tiny_kb(engine, "wheel-worker-kb", tmp_path / "kb")
    stored = dataset_service.register_dataset(
        engine, write_dataset(tmp_path / "upload" / "wheel-worker.json", "wheel-worker-kb", tiny_cases(chunks)[:3]))
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy2(ROOT / "dagster.yaml", home / "dagster.yaml")
    workdir = tmp_path / "empty"
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "RAG_PROJECT_ROOT", "RAG_STRATEGIES_FILE", "RAG_DATASETS_DIR",
                        "RAG_PGDATA", "VIRTUAL_ENV")}
    env.update(DAGSTER_HOME=str(home), RAG_DAGSTER_PG_URL=dagster_database_url(),
               RAG_DATABASE_URL=engine.url.render_as_string(hide_password=False), PYTHONWARNINGS="ignore")
    partition = "wheel-worker|keyword-v1"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        patch.setenv("RAG_DAGSTER_PG_URL", env["RAG_DAGSTER_PG_URL"])
        with dg.DagsterInstance.get() as instance:
            instance.add_dynamic_partitions("dataset", ["wheel-worker"])
    config = tmp_path / "run_config.yaml"  # JSON is YAML
    config.write_text(json.dumps({"ops": {"evaluation_dataset": {"config": {"dataset_id": stored.dataset_id}}}}))
    proc = subprocess.run(
        [str(installed / "bin" / "python"), "-m", "dagster", "job", "execute", "-m", "rag_pipeline.definitions",
         "-j", "evaluate_retrieval", "--tags", json.dumps({"dagster/partition": partition}),
         "--config", str(config)],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not list(workdir.iterdir()), f"the run wrote into its working directory: {list(workdir.iterdir())}"
    with engine.connect() as conn:
        run = conn.execute(sa.text(
            "SELECT status, case_count, worker FROM retrieval_evaluation_runs WHERE partition_key = :pk "
            "ORDER BY started_at DESC LIMIT 1"), {"pk": partition}).one()
    assert (run.status, run.case_count, run.worker) == ("succeeded", 3, socket.gethostname())
