"""Knowledge base → evaluation lineage on a real Dagster instance and real Postgres: the ``knowledge_base`` asset
partitioned by name with its content version as data version, every run recording the version it measured, and
the evaluation partitions of a dataset going out of date (Dagster's stale status, what the UI shows as
"Unsynced") exactly when the knowledge base its dataset names changes — through Dagster or outside it."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import jsonschema
import pytest
import sqlalchemy as sa
from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._time import get_current_datetime

from rag_pipeline.cli.runs_table import comparison_table
from rag_pipeline.contracts.runs import RunSummary
from rag_pipeline.definitions import defs
from rag_pipeline.defs.evaluation import evaluation_dataset, evaluation_run
from rag_pipeline.defs.knowledge_base import knowledge_base
from rag_pipeline.defs.lineage import knowledge_base_versions
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.defs.sensors import reevaluate_stale_runs
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.service import evaluations, knowledge_bases, lineage
from rag_pipeline_tests.eval_helpers import TINY_DOCS, tiny_cases, write_dataset

# two KBs ingested and evaluated through Dagster per test
pytestmark = pytest.mark.slow

SUMMARY = dg.AssetKey("evaluation_run_summary")
STRATEGIES = ("keyword-v1", "hybrid-v1")


def _ingest(instance, kb: str, folder: Path):
    instance.add_dynamic_partitions("knowledge_base", [kb])
    config = {"source_dir": str(folder), "text_search": "simple", "chunk_size": 500, "chunk_overlap": 80}
    result = dg.materialize([knowledge_base], partition_key=kb, instance=instance, resources={"rag_db": RagDatabase()},
                            run_config={"ops": {"knowledge_base": {"config": config}}})
    [mat] = result.asset_materializations_for_node("knowledge_base")
    return mat


def _evaluate(instance, partition: str):
    result = dg.materialize([evaluation_dataset, evaluation_run], partition_key=partition, instance=instance,
                            resources={"rag_db": RagDatabase()}, raise_on_error=False)
    assert result.success
    return result


def _status(instance, key: dg.AssetKey, partition: str) -> StaleStatus:
    graph = defs.resolve_asset_graph()
    view = AssetGraphView(temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
                          instance=instance, asset_graph=graph)
    return CachingStaleStatusResolver(instance, graph, view).get_status(key, partition)


def _folder(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for doc, text in TINY_DOCS.items():
        (folder / doc).write_text(text + "\n", encoding="utf-8")
    return folder


def _chunks(engine, kb: str) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT d.original_name, c.id FROM document_chunks c JOIN documents d ON d.id = c.document_id "
            "JOIN knowledge_bases kb ON kb.id = c.knowledge_base_id WHERE kb.name = :n AND c.is_current"), {"n": kb})
        return {r.original_name: str(r.id) for r in rows}


@pytest.fixture
def two_kbs(engine, tmp_path, datasets, kb_name):
    """Two knowledge bases ingested through the asset, one dataset on each, both evaluated with two strategies."""
    instance = dg.DagsterInstance.ephemeral()
    names = {"a": f"{kb_name[:40]}-a", "b": f"{kb_name[:40]}-b"}
    folders = {key: _folder(tmp_path, f"docs-{key}") for key in names}
    mats = {key: _ingest(instance, kb, folders[key]) for key, kb in names.items()}
    for key, kb in names.items():
        write_dataset(datasets / "x.json", kb, tiny_cases(_chunks(engine, kb)), name=f"lin-{key}")
    instance.add_dynamic_partitions("dataset", ["lin-a", "lin-b"])
    for key in names:
        for strategy in STRATEGIES:
            _evaluate(instance, f"lin-{key}|{strategy}")
    return instance, names, folders, mats


def test_runs_record_the_version_and_partitions_go_stale_only_when_their_knowledge_base_changes(engine, two_kbs):
    instance, names, folders, mats = two_kbs
    version_a = lineage.knowledge_base_version(engine, names["a"]).version
    assert mats["a"].tags["dagster/data_version"] == version_a == mats["a"].metadata["knowledge_base_version"].value
    assert knowledge_bases.knowledge_base_stats(engine, names["a"]).version == version_a
    with engine.connect() as conn:
        rows = run_records.list_runs(conn, dataset="lin-a")
    assert {r.strategy_version for r in rows} == set(STRATEGIES)
    assert {r.knowledge_base_version for r in rows} == {version_a}
    [summary] = (s.model_dump() for s in evaluations.run_summaries(engine, [str(rows[0].id)]))
    assert summary["knowledge_base"] == {"id": str(rows[0].knowledge_base_id), "name": names["a"],
                                         "version": version_a}
    summary_schema = RunSummary.model_json_schema()  # generated from the contract (was a hand-written schema)
    assert set(summary_schema["$defs"]["KnowledgeBaseRef"]["required"]) == {"id", "name", "version"}
    jsonschema.validate(summary, summary_schema)
    header, _, row = comparison_table([summary], legend=False).splitlines()
    assert "kb version" in header and version_a[:12] in row and version_a[:13] not in row
    for key in ("a", "b"):
        for strategy in STRATEGIES:
            assert _status(instance, SUMMARY, f"lin-{key}|{strategy}") == StaleStatus.FRESH

    # an unchanged folder: same data version, nothing goes stale
    again = _ingest(instance, names["a"], folders["a"])
    assert again.tags["dagster/data_version"] == version_a
    assert _status(instance, SUMMARY, "lin-a|keyword-v1") == StaleStatus.FRESH

    # a new document in knowledge base a: every partition of dataset lin-a is out of date, lin-b's are not
    (folders["a"] / "new.md").write_text("Parking permits are renewed every January at the front desk.\n")
    changed = _ingest(instance, names["a"], folders["a"])
    new_version = changed.tags["dagster/data_version"]
    assert new_version != version_a
    for asset in ("retrieval_candidates", "case_metrics", "evaluation_run_summary"):
        for strategy in STRATEGIES:
            assert _status(instance, dg.AssetKey(asset), f"lin-a|{strategy}") == StaleStatus.STALE, (asset, strategy)
            assert _status(instance, dg.AssetKey(asset), f"lin-b|{strategy}") == StaleStatus.FRESH, (asset, strategy)
    stale = lineage.stale_runs(engine)
    mine = sorted((s.dataset, s.strategy_version) for s in stale if s.dataset in ("lin-a", "lin-b"))
    assert mine == [("lin-a", s) for s in sorted(STRATEGIES)]
    assert {s.measured_version for s in stale if s.dataset == "lin-a"} == {version_a}

    # the opt-in sensor asks for exactly those partitions; re-evaluating one makes it current again
    with dg.build_sensor_context(instance=instance, resources={"rag_db": RagDatabase()}) as context:
        requests = reevaluate_stale_runs(context)
    mine = sorted(r.partition_key for r in requests if str(r.partition_key).startswith("lin-"))
    assert mine == sorted(f"lin-a|{s}" for s in STRATEGIES)
    assert all(new_version in r.run_key for r in requests if str(r.partition_key).startswith("lin-"))
    _evaluate(instance, "lin-a|keyword-v1")
    assert _status(instance, SUMMARY, "lin-a|keyword-v1") == StaleStatus.FRESH
    assert _status(instance, SUMMARY, "lin-a|hybrid-v1") == StaleStatus.STALE
    left = {(s.dataset, s.strategy_version) for s in lineage.stale_runs(engine)}
    assert ("lin-a", "keyword-v1") not in left and ("lin-a", "hybrid-v1") in left


def test_a_change_made_outside_dagster_is_reported_by_the_sensor(engine, two_kbs, tmp_path, kb_name):
    instance, names, folders, _ = two_kbs
    sensor_resources = {"rag_db": RagDatabase()}
    with dg.build_sensor_context(instance=instance, resources=sensor_resources) as context:
        first = knowledge_base_versions(context)
    # the knowledge bases ingested through Dagster are already known with their versions: nothing to report
    assert not [e for e in first.asset_events if e.partition in names.values()]
    # the CLI's path (the service, no Dagster): a removed document in b, and a new knowledge base
    (folders["b"] / "coffee.md").unlink()
    knowledge_bases.ingest(engine, folders["b"], names["b"], text_search="simple")
    outside = f"{kb_name[:40]}-cli"
    knowledge_bases.ingest(engine, _folder(tmp_path, "docs-cli"), outside, text_search="simple")
    with dg.build_sensor_context(instance=instance, cursor=first.cursor, resources=sensor_resources) as context:
        result = knowledge_base_versions(context)
    [add] = result.dynamic_partitions_requests
    assert outside in add.partition_keys and names["b"] not in add.partition_keys
    version_b = lineage.knowledge_base_version(engine, names["b"]).version
    kb_events = {e.partition: e for e in result.asset_events if e.asset_key == dg.AssetKey("knowledge_base")}
    assert kb_events[names["b"]].tags["dagster/data_version"] == version_b
    observed = {e.partition: e for e in result.asset_events if e.asset_key == dg.AssetKey("dataset_knowledge_base")}
    assert set(observed) & {"lin-a", "lin-b"} == {"lin-b"}
    assert observed["lin-b"].tags["dagster/data_version"] == version_b
    instance.add_dynamic_partitions("knowledge_base", list(add.partition_keys))  # what the daemon does
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    for strategy in STRATEGIES:
        assert _status(instance, SUMMARY, f"lin-b|{strategy}") == StaleStatus.STALE
        assert _status(instance, SUMMARY, f"lin-a|{strategy}") == StaleStatus.FRESH
    with dg.build_sensor_context(instance=instance, cursor=result.cursor, resources=sensor_resources) as context:
        assert isinstance(knowledge_base_versions(context), dg.SkipReason)  # nothing changed since
