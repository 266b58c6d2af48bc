"""The ``evaluate_strategies`` job on real Postgres: one Dagster run and one step for the click's strategies (at
once, in forked processes), each strategy's ``<dataset>|<strategy>`` partition materialised (its lineage), each
failure in its own run row and named by the step's failure."""

from __future__ import annotations

import dagster as dg
import sqlalchemy as sa

from rag_pipeline.definitions import defs
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline.retrieval.strategy_store import register_strategy
from rag_pipeline.service.datasets import register_dataset
from rag_pipeline.service.queued_runs import queue_evaluations
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, tiny_cases, write_dataset

KB = "eval-tiny-strategies"
GOOD = ["hybrid-v1", "bm25-v1"]
RERANK = "hybrid-bm25-rerank-minilm-v1"  # needs all-minilm-l6-v2 vectors, which the tiny knowledge base lacks
ASSETS = ("evaluation_dataset", "retrieval_candidates", "case_metrics", "evaluation_run_summary")


def _queued_row(engine, dataset_id: str, version: str, dagster_run_id: str) -> str:
    """A queued row for a strategy the knowledge base cannot run (queued before the rule refused it)."""
    strategy = get_strategy(version)
    with engine.begin() as conn:
        kb_id = conn.execute(sa.text("SELECT id FROM knowledge_bases WHERE name = :n"), {"n": KB}).scalar()
        run_id = run_records.create_run(conn, dataset_id=dataset_id, knowledge_base_id=kb_id, strategy=strategy,
                                        params_hash=register_strategy(conn, strategy),
                                        partition_key=f"tiny-many|{version}", dagster_run_id=dagster_run_id,
                                        queued=True)
    return str(run_id)


def test_one_step_evaluates_the_strategies_and_materialises_each_partition(engine, datasets, tmp_path):
    chunks = ingest_tiny_kb(engine, KB, tmp_path / "kb")
    stored = register_dataset(engine, write_dataset(datasets / "tiny-many.json", KB, tiny_cases(chunks)))
    queued = queue_evaluations(engine, KB, stored.dataset_id, GOOD)
    dagster_run_id = queued.runs[0].dagster_run_id
    assert {r.dagster_run_id for r in queued.runs} == {dagster_run_id}, "one Dagster run for the click"
    rows = {r.strategy_version: r.run_id for r in queued.runs}
    rows[RERANK] = _queued_row(engine, stored.dataset_id, RERANK, dagster_run_id)

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("dataset", ["tiny-many"])
    result = defs.resolve_job_def("evaluate_strategies").execute_in_process(
        instance=instance, run_id=dagster_run_id, raise_on_error=False,
        run_config={"ops": {"evaluate_click": {"config": {"dataset_id": stored.dataset_id, "runs": rows}}}})

    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_key == "evaluate_click"
    why = failure.step_failure_data.user_failure_data.description
    assert RERANK in why and "all-minilm-l6-v2" in why and "hybrid-v1" not in why, why  # the one that failed
    with engine.connect() as conn:
        state = {v: conn.execute(sa.text("SELECT status, error, dagster_run_id, partition_key FROM "
                                         "retrieval_evaluation_runs WHERE id = :id"), {"id": i}).one()
                 for v, i in rows.items()}
    for version in GOOD:
        assert tuple(state[version])[::2] == ("succeeded", dagster_run_id), state[version]
        assert state[version].partition_key == f"tiny-many|{version}"
    status, error, _, _ = state[RERANK]
    assert status == "failed" and "all-minilm-l6-v2" in error and RERANK in error, error

    for asset in ASSETS:  # what the Dagster UI shows: each good partition materialised by this one run
        key = dg.AssetKey(asset)
        materialised = instance.get_materialized_partitions(key)
        assert {f"tiny-many|{v}" for v in GOOD} <= materialised, (asset, materialised)
        if asset != "evaluation_dataset":
            assert f"tiny-many|{RERANK}" not in materialised, asset
        for version in GOOD:
            [record] = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=key, asset_partitions=[f"tiny-many|{version}"]), limit=5).records
            assert record.run_id == dagster_run_id
            if asset == "evaluation_run_summary":
                assert record.asset_materialization.metadata["run_id"].value == rows[version]
