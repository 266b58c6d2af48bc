"""One click → one Dagster run: :func:`queue_evaluations` (what ``POST …/retrieval/evaluate`` and the console call)
queues the click's rows; the ``queued_evaluations`` sensor of a real ``dagster-daemon`` requests one
``evaluate_strategies`` run and its run launcher starts the run worker; every strategy's run row settles and each
``<dataset>|<strategy>`` partition is materialised by that run."""

from __future__ import annotations

import json
import time

import dagster as dg
import pytest
import sqlalchemy as sa

from rag_pipeline.defs.jobs import QUEUE_TAG
from rag_pipeline.service.datasets import register_dataset
from rag_pipeline.service.queued_runs import queue_evaluations
from rag_pipeline_tests.web.conftest import DEMO_DATASET

JOB = "evaluate_strategies"
STRATEGIES = ["hybrid-v1", "bm25-v1", "keyword-v1"]
DATASET = "demo-one-run"


@pytest.mark.slow  # a Dagster daemon and a run worker process
def test_one_click_is_one_dagster_run_of_one_step_with_a_partition_per_strategy(
        engine, demo_kb, web_env, web_home, dagster_daemon, monkeypatch, tmp_path):
    for name in ("DAGSTER_HOME", "RAG_DAGSTER_PG_URL", "RAG_DATASETS_DIR", "RAG_EVALUATION_QUEUE"):
        monkeypatch.setenv(name, web_env[name])
    cases = json.loads(DEMO_DATASET.read_text(encoding="utf-8"))["cases"][:5]
    path = tmp_path / f"{DATASET}.json"
    path.write_text(json.dumps({"knowledge_base": demo_kb, "cases": cases}), encoding="utf-8")
    stored = register_dataset(engine, path)
    queued = queue_evaluations(engine, demo_kb, stored.dataset_id, STRATEGIES)
    [queue_id] = {r.dagster_run_id for r in queued.runs}
    ids = [r.run_id for r in queued.runs]

    deadline = time.monotonic() + 600
    while True:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT strategy_version, status, error, dagster_run_id FROM "
                                        "retrieval_evaluation_runs WHERE id::text = ANY(:ids)"), {"ids": ids}).all()
        if all(r.status in ("succeeded", "failed") for r in rows):
            break
        log = (web_home / "daemon.log").read_text()[-3000:]
        assert time.monotonic() < deadline, f"not settled in 600 s: {rows}\n{log}"
        time.sleep(1)
    assert sorted(r.strategy_version for r in rows) == sorted(STRATEGIES)
    instance = dg.DagsterInstance.get()
    runs = instance.get_runs(filters=dg.RunsFilter(tags={"rag/dataset": DATASET}))
    assert [(r.job_name, r.tags[QUEUE_TAG]) for r in runs] == [(JOB, queue_id)], "one Dagster run for the click"
    dagster_run_id = runs[0].run_id
    assert all((r.status, r.dagster_run_id) == ("succeeded", dagster_run_id) for r in rows), rows
    deadline = time.monotonic() + 60  # the run worker reports SUCCESS just after the last row settles
    while instance.get_run_by_id(dagster_run_id).status != dg.DagsterRunStatus.SUCCESS:
        assert time.monotonic() < deadline, instance.get_run_by_id(dagster_run_id).status
        time.sleep(0.5)
    steps = {e.step_key for e in instance.all_logs(dagster_run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)}
    assert steps == {"evaluate_click"}, "the click's strategies at once in one step"
    for asset in ("evaluation_dataset", "retrieval_candidates", "case_metrics", "evaluation_run_summary"):
        for version in STRATEGIES:
            [record] = instance.fetch_materializations(dg.AssetRecordsFilter(
                asset_key=dg.AssetKey(asset), asset_partitions=[f"{DATASET}|{version}"]), limit=5).records
            assert record.run_id == dagster_run_id, (asset, version)
