"""Dagster Definitions: loadable, the knowledge_base asset group, and a real materialisation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from rag_pipeline import definitions
from rag_pipeline.defs.knowledge_base import knowledge_base
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL
from rag_pipeline_tests.reliability_helpers import scratch_database, with_database

ROOT = Path(__file__).resolve().parents[2]
KEY = dg.AssetKey("knowledge_base")


def test_definitions_are_loadable() -> None:
    dg.Definitions.validate_loadable(definitions.defs)  # raises on an invalid definition
    keys = {k.to_user_string() for k in definitions.defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"knowledge_base", "dataset_knowledge_base", "evaluation_dataset", "evaluation_run_summary",
            "strategy_comparison", "fusion_sweep"} <= keys


def test_knowledge_base_asset_group_and_job() -> None:
    defs = definitions.defs
    assets_def = defs.resolve_assets_def(KEY)
    assert assets_def.group_names_by_key[KEY] == "knowledge_base"
    assert "rag_db" in assets_def.required_resource_keys
    job = defs.resolve_job_def("ingest_knowledge_base")
    assert job.asset_layer.selected_asset_keys == {KEY}
    assert job.partitions_def == assets_def.partitions_def == dg.DynamicPartitionsDefinition(name="knowledge_base")
    specs = {s.key: s for s in defs.resolve_all_asset_specs()}
    assert specs[KEY].group_name == "knowledge_base"


def _write_folder(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "one.md").write_text("# One\n\nThe first document talks about VPN tokens and how to reset them.\n",
                                   encoding="utf-8")
    (folder / "two.txt").write_text("第二个文档介绍差旅报销流程。报销需要在三十天内提交。\n", encoding="utf-8")
    (folder / "three.jsonl").write_text('{"id": "x", "text": "A third document from JSONL."}\n', encoding="utf-8")


def _materialise(kb_name: str, config: dict, resource: RagDatabase | None = None,
                 instance: dg.DagsterInstance | None = None) -> dg.ExecuteInProcessResult:
    """Materialise partition ``kb_name`` of ``knowledge_base`` (the partition is the knowledge base's name)."""
    instance = instance or dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("knowledge_base", [kb_name])
    return dg.materialize([knowledge_base], resources={"rag_db": resource or RagDatabase()}, instance=instance,
                          partition_key=kb_name, run_config={"ops": {"knowledge_base": {"config": config}}},
                          raise_on_error=False)


def _metadata(result: dg.ExecuteInProcessResult) -> dict:
    [mat] = result.asset_materializations_for_node("knowledge_base")
    return {k: v.value for k, v in mat.metadata.items()}


def test_materialise_knowledge_base(engine, kb_name: str, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    _write_folder(folder)
    config = {"source_dir": str(folder), "text_search": "chinese",
              "chunk_size": 300, "chunk_overlap": 40, "models": [DEFAULT_MODEL]}
    instance = dg.DagsterInstance.ephemeral()

    result = _materialise(kb_name, config, instance=instance)
    assert result.success
    meta = _metadata(result)
    assert meta["knowledge_base"] == kb_name
    assert (meta["documents_new"], meta["documents_changed"], meta["documents_unchanged"]) == (3, 0, 0)
    assert meta["chunks_inserted"] == 3 and meta["current_chunks"] == 3
    assert meta["embeddings"] == {DEFAULT_MODEL: 3}
    with engine.connect() as conn:
        n = conn.execute(sa.text("SELECT count(*) FROM document_chunks WHERE knowledge_base_id = :kb"),
                         {"kb": chunking.knowledge_base_id(kb_name)}).scalar()
    assert n == 3

    # re-materialising an unchanged folder changes nothing
    again = _materialise(kb_name, config, instance=instance)
    assert again.success
    meta = _metadata(again)
    assert (meta["documents_new"], meta["documents_unchanged"], meta["chunks_inserted"]) == (0, 3, 0)
    assert meta["current_chunks"] == 3
    versions = [r.asset_materialization.tags["dagster/data_version"] for r in instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=KEY, asset_partitions=[kb_name]), limit=5).records]
    assert len(versions) == 2 and versions[0] == versions[1] == meta["knowledge_base_version"], \
        "an unchanged folder keeps the data version"
    assert len(versions[0]) == 64


@pytest.mark.db  # a RagDatabase() resource connects
def test_materialise_reports_a_bad_folder(tmp_path: Path, kb_name: str) -> None:
    result = _materialise(kb_name, {"source_dir": str(tmp_path / "missing")})
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    error = failure.step_failure_data.error
    assert error.cause is not None and error.cause.cls_name == "SourceError"
    assert "not a folder" in error.cause.message


@pytest.mark.slow  # a process importing Dagster
def test_module_import_exposes_defs() -> None:
    """``dagster ... -m rag_pipeline.definitions`` imports the module and finds ``defs``."""
    proc = subprocess.run([sys.executable, "-c", "import rag_pipeline.definitions as d; print(d.defs)"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Definitions(") and "knowledge_base" in proc.stdout


@pytest.fixture(scope="module")
def other_database(engine):  # the session server must be up
    """A second, empty database on the test server: (name, plain postgresql:// URL)."""
    with scratch_database("rag_restest") as (url, _):
        yield sa.engine.make_url(url).database, url


@pytest.fixture
def keep_rag_database_url():
    """Today RagDatabase(url=...).engine() may set RAG_DATABASE_URL process-wide: undo it after the test."""
    before = os.environ.get("RAG_DATABASE_URL")
    yield
    if before is None:
        os.environ.pop("RAG_DATABASE_URL", None)
    else:
        os.environ["RAG_DATABASE_URL"] = before


def test_rag_database_url_is_honoured(engine, other_database, monkeypatch, keep_rag_database_url) -> None:
    """A configured ``url`` wins over RAG_DATABASE_URL and does not leak into the process environment."""
    name, url = other_database
    session_url = engine.url.render_as_string(hide_password=False)
    monkeypatch.setenv("RAG_DATABASE_URL", session_url)
    assert RagDatabase(url=url).engine().url.database == name
    assert os.environ["RAG_DATABASE_URL"] == session_url
    monkeypatch.delenv("RAG_DATABASE_URL")
    assert RagDatabase(url=url).engine().url.database == name
    assert "RAG_DATABASE_URL" not in os.environ, "the resource must not set RAG_DATABASE_URL for the whole process"


def test_rag_database_accepts_a_psycopg2_url(other_database, kb_name: str, tmp_path: Path,
                                            keep_rag_database_url) -> None:
    """The Dagster-storage style ``postgresql+psycopg2://`` URL works for the KB resource too."""
    name, url = other_database
    folder = tmp_path / "docs"
    _write_folder(folder)
    resource = RagDatabase(url=with_database(url, name, "psycopg2"))
    result = _materialise(kb_name, {"source_dir": str(folder), "text_search": "simple"}, resource)
    failures = [(e.step_failure_data.error.cause or e.step_failure_data.error).message for e in result.all_events
                if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert result.success, failures
    assert _metadata(result)["current_chunks"] == 3


def test_the_resource_sizes_its_engine_pool_to_the_readers_it_hands_out(engine, monkeypatch) -> None:
    monkeypatch.delenv("RAG_EVAL_READERS", raising=False)
    assert RagDatabase().reader_count() == 2 and RagDatabase(readers=3).reader_count() == 3
    assert RagDatabase(readers=3).reader_count(7) == 7, "a run's own setting wins"
    big = RagDatabase(readers=9).engine()
    assert big.pool.size() == 12, "9 read connections + the writer, the heartbeat and the question vectors"
    assert RagDatabase().engine().pool.size() == 5, "never below the default pool"
    assert big is RagDatabase(readers=9).engine(), "one engine per URL and pool size"
    monkeypatch.setenv("RAG_EVAL_READERS", "6")
    assert RagDatabase().engine().pool.size() == 9


def test_the_code_location_takes_the_database_url_as_an_env_var(monkeypatch) -> None:
    from rag_pipeline.defs.resources import rag_database

    monkeypatch.setenv("RAG_DATABASE_URL", "postgresql://alice:s3cret@db.example/rag")
    resource = rag_database()
    assert isinstance(resource.url, dg.EnvVar) and "s3cret" not in repr(resource.url)
    monkeypatch.delenv("RAG_DATABASE_URL")
    assert rag_database().url is None
