"""The evaluation assets on real Postgres: materialise a partition, failures, schedule,
``dagster job execute`` in a subprocess, and a snapshot of the asset graph."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from rag_pipeline.contracts.runs import STAGE_LABELS
from rag_pipeline.defs.evaluation import evaluation_dataset, evaluation_run
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.defs.schedules import nightly_reevaluation
from rag_pipeline.retrieval.strategies import load_registry
from rag_pipeline_tests.eval_helpers import table_counts, tiny_cases, write_dataset

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).resolve().parent / "asset_graph_snapshot.json"
KB = "eval-tiny-dagster"
VERSIONS = list(load_registry())


def _materialize(instance, key: str, run_config: dict | None = None):
    return dg.materialize([evaluation_dataset, evaluation_run], partition_key=key, instance=instance,
                          resources={"rag_db": RagDatabase()}, run_config=run_config, raise_on_error=False)


def _metadata(result, asset: str) -> dict:
    events = [e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey(asset)]
    assert len(events) == 1
    return events[0].materialization.metadata


def test_materialize_one_partition_twice(engine, chunks, datasets):
    write_dataset(datasets / "tiny-dg.json", KB, tiny_cases(chunks))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("dataset", ["tiny-dg"])
    first = _materialize(instance, "tiny-dg|hybrid-v1")
    assert first.success
    summary = _metadata(first, "evaluation_run_summary")
    run_id = summary["run_id"].value
    with engine.connect() as conn:
        run = conn.execute(sa.text("SELECT * FROM retrieval_evaluation_runs WHERE id = :id"), {"id": run_id}).one()
        n_cands, n_cases = (conn.execute(sa.text(f"SELECT count(*) FROM {t} WHERE evaluation_run_id = :id"),
                                         {"id": run_id}).scalar_one()
                            for t in ("retrieval_evaluation_candidates", "retrieval_evaluation_case_results"))
        n_datasets = conn.execute(sa.text("SELECT count(*) FROM retrieval_evaluation_datasets WHERE id = :id"),
                                  {"id": run.dataset_id}).scalar_one()
    assert (run.status, run.is_current, run.partition_key) == ("succeeded", True, "tiny-dg|hybrid-v1")
    assert run.dagster_run_id == first.run_id and n_datasets == 1
    assert (n_cands, n_cases) == (run.candidate_count, 5) and n_cands == 25
    for m in ("precision_at_k", "recall_at_k", "reciprocal_rank", "ndcg_at_k"):
        # rounded to 4 decimals for display; the database keeps full precision
        assert isinstance(summary[m], dg.FloatMetadataValue) and summary[m].value == round(getattr(run, m), 4)
    assert "backup-001" in summary["worst_cases"].value or "injection-001" in summary["worst_cases"].value
    stages = summary["stage_seconds"].value  # the run's wall time per stage, as its summary stores it
    assert list(stages) == [*STAGE_LABELS.values(), "wall"]
    assert stages["wall"] == round(run.summary["stages"]["wall_s"], 4) and all(v >= 0 for v in stages.values())
    assert _metadata(first, "retrieval_candidates")["dagster/row_count"].value == 25
    per_case = _metadata(first, "case_metrics")["per_case"].value
    assert [r.data["case_id"] for r in per_case.records] == [c["case_id"] for c in tiny_cases(chunks)]
    assert _metadata(first, "evaluation_dataset")["dagster/row_count"].value == 5

    second = _materialize(instance, "tiny-dg|hybrid-v1")
    assert second.success
    with engine.connect() as conn:
        history = conn.execute(sa.text(
            "SELECT id::text, is_current FROM retrieval_evaluation_runs WHERE partition_key = 'tiny-dg|hybrid-v1' "
            "ORDER BY started_at")).all()
    assert history == [(run_id, False), (_metadata(second, "evaluation_run_summary")["run_id"].value, True)]


def test_bare_array_dataset_takes_the_knowledge_base_from_config(chunks, datasets):
    write_dataset(datasets / "bare.json", None, tiny_cases(chunks)[:2])
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("dataset", ["bare"])
    assert not _materialize(instance, "bare|keyword-v1").success
    config = {"ops": {"evaluation_dataset": {"config": {"knowledge_base": KB}}}}
    result = _materialize(instance, "bare|keyword-v1", run_config=config)
    assert result.success and _metadata(result, "evaluation_run_summary")["cases"].value == 2


def test_bad_dataset_fails_once_with_the_message_and_writes_nothing(engine, chunks, datasets):
    shutil.copy(ROOT / "rag_pipeline_tests" / "data" / "bad_datasets" / "many_problems.json", datasets / "broken.json")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("dataset", ["broken"])
    before = table_counts(engine)
    result = _materialize(instance, "broken|hybrid-v1")
    assert not result.success
    failures = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert len(failures) == 1
    message = failures[0].step_failure_data.user_failure_data.description
    assert "broken.json: cases[1] (case_id 'bad-k'): field 'k'" in message
    assert "cases[5] (case_id 'ok-1'): field 'case_id': duplicate case_id" in message
    assert not [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_UP_FOR_RETRY]
    assert table_counts(engine) == before


def test_the_comparison_waits_for_the_baseline(engine, chunks, datasets):
    from rag_pipeline.evaluation.datasets.load import load_dataset
    from rag_pipeline.evaluation.evaluate import evaluate_dataset
    from rag_pipeline.retrieval.strategies import get_strategy
    from rag_pipeline.service.analysis import comparison_ready

    dataset = load_dataset(write_dataset(datasets / "epsilon.json", KB, tiny_cases(chunks)[:2]))
    assert "no stored dataset 'epsilon'" in comparison_ready(engine, "epsilon")
    evaluate_dataset(engine, dataset, get_strategy("keyword-v1"))
    assert comparison_ready(engine, "epsilon").startswith("the baseline hybrid-v1 has no run on version")
    evaluate_dataset(engine, dataset, get_strategy("hybrid-v1"))
    assert comparison_ready(engine, "epsilon") is True


def test_nightly_schedule_requests_every_dataset_with_a_file(datasets):
    (datasets / "kept.json").write_text("[]", encoding="utf-8")
    with dg.instance_for_test() as instance:  # the schedule context needs an instance with a ref
        instance.add_dynamic_partitions("dataset", ["kept", "gone"])
        when = datetime(2026, 1, 2, 3, tzinfo=UTC)
        with dg.build_schedule_context(instance=instance, scheduled_execution_time=when) as context:
            requests = nightly_reevaluation(context)
    assert [r.partition_key for r in requests] == [f"kept|{v}" for v in VERSIONS]
    assert requests[0].run_key == f"nightly:2026-01-02:kept:{VERSIONS[0]}"


@pytest.mark.slow  # `dagster job execute` in a subprocess
def test_dagster_job_execute_in_a_subprocess(engine, chunks, datasets, tmp_path, monkeypatch):
    """The docs/evaluating.md command, on an instance configured by the repo's dagster.yaml (Postgres storage)."""
    from rag_pipeline.storage.engine import dagster_database_url

    write_dataset(datasets / "tiny-cli.json", KB, tiny_cases(chunks)[:3])
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("RAG_DAGSTER_PG_URL", dagster_database_url())
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("dataset", ["tiny-cli"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    dagster = Path(sys.executable).with_name("dagster")
    # cwd outside the repo: a developer's .env in the repo root would point Dagster at their own instance
    proc = subprocess.run(
        [str(dagster), "job", "execute", "-m", "rag_pipeline.definitions", "-j", "evaluate_retrieval",
         "--tags", json.dumps({"dagster/partition": "tiny-cli|keyword-v1"})],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with engine.connect() as conn:
        run = conn.execute(sa.text(
            "SELECT status, is_current, case_count, dagster_run_id FROM retrieval_evaluation_runs "
            "WHERE partition_key = 'tiny-cli|keyword-v1'")).one()
    assert (run.status, run.is_current, run.case_count) == ("succeeded", True, 3)
    with dg.DagsterInstance.get() as instance:
        dagster_run = instance.get_run_by_id(run.dagster_run_id)
        assert dagster_run.status == dg.DagsterRunStatus.SUCCESS
        assert dagster_run.tags["dagster/partition"] == "tiny-cli|keyword-v1"


def _graph_snapshot() -> dict:
    from rag_pipeline.definitions import defs

    graph = defs.resolve_asset_graph()
    assets = []
    for key in sorted(graph.get_all_asset_keys()):
        node = graph.get(key)
        parts = node.partitions_def
        assets.append({
            "key": key.to_user_string(),
            "deps": sorted(p.to_user_string() for p in node.parent_keys),
            "group": node.group_name,
            "kinds": sorted(node.kinds),
            "partitions": None if parts is None else sorted(
                f"{d.name}:{type(d.partitions_def).__name__}" for d in getattr(parts, "partitions_defs", []))
            or type(parts).__name__,
        })
    return {
        "assets": assets,
        "jobs": sorted(j.name for j in defs.jobs or []),
        "sensors": sorted(s.name for s in defs.sensors or []),
        "schedules": sorted(s.name for s in defs.schedules or []),
    }


def test_asset_graph_snapshot():
    """Regenerate after an intended change with ``RAG_UPDATE_SNAPSHOTS=1 pytest -k asset_graph_snapshot``."""
    current = _graph_snapshot()
    if os.environ.get("RAG_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(json.dumps(current, indent=2) + "\n", encoding="utf-8")
    assert current == json.loads(SNAPSHOT.read_text(encoding="utf-8"))


def test_a_run_names_the_process_that_executed_it(engine, chunks, datasets):
    """Outside a Celery worker the worker is this host: in the run row, the Dagster run's tags, the metadata and
    the run's summary contract (deploy/celery/README.md)."""
    import socket

    from rag_pipeline.service import evaluations

    write_dataset(datasets / "tiny-worker.json", KB, tiny_cases(chunks)[:2])
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("dataset", ["tiny-worker"])
    result = _materialize(instance, "tiny-worker|keyword-v1")
    assert result.success
    summary = _metadata(result, "evaluation_run_summary")
    assert summary["worker"].value == socket.gethostname()
    run_id = summary["run_id"].value
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT worker FROM retrieval_evaluation_runs WHERE id = :id"),
                              {"id": run_id}).scalar_one()
    assert stored == socket.gethostname()
    assert instance.get_run_by_id(result.run_id).tags["rag/worker"] == socket.gethostname()
    assert evaluations.run_summaries(engine, [run_id])[0].worker == socket.gethostname()
