"""The ``fusion_sweep`` asset on real Postgres: materialise a dataset partition from a real pool run,
fail clearly without one, and stay out of the ``evaluate_retrieval`` job."""

from __future__ import annotations

import base64
import uuid

import dagster as dg
import pytest
import yaml

from rag_pipeline import definitions
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.defs.tuning import fusion_sweep
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.retrieval.strategies import get_strategy, parse_registry
from rag_pipeline_tests.analysis.test_tuning_db import POOL_STRATEGY, QUESTIONS, build_world

KEY = dg.AssetKey("fusion_sweep")


@pytest.fixture(scope="module")
def dataset(engine, tmp_path_factory):
    suffix = uuid.uuid4().hex[:8]
    path, _ = build_world(engine, tmp_path_factory.mktemp("tune_asset"), f"sweep-kb-{suffix}", f"sweep-{suffix}")
    ds = load_dataset(path)
    evaluate_dataset(engine, ds, get_strategy(POOL_STRATEGY))
    return ds


def _materialize(partition: str, config: dict | None = None) -> dg.ExecuteInProcessResult:
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("dataset", [partition])
    run_config = {"ops": {"fusion_sweep": {"config": config}}} if config else None
    return dg.materialize([fusion_sweep], partition_key=partition, instance=instance,
                          resources={"rag_db": RagDatabase()}, run_config=run_config, raise_on_error=False)


def test_fusion_sweep_materialises_with_yaml_chart_and_table(dataset):
    result = _materialize(dataset.name, {"folds": 4})
    assert result.success
    (event,) = result.get_asset_materialization_events()
    assert event.asset_key == KEY and event.partition == dataset.name
    meta = {k: v.value for k, v in event.materialization.metadata.items()}
    assert meta["pool_strategy"] == POOL_STRATEGY and meta["cases"] == len(QUESTIONS)
    assert meta["configurations"] == 112 and meta["metric"] == "ndcg_at_k"
    assert meta["cv_ci_low"] <= meta["cv_mean"] <= meta["cv_ci_high"]
    assert meta["cv_mean"] <= meta["predicted_mean"] + 1e-12
    assert meta["gain_ci_low"] <= meta["gain"] <= meta["gain_ci_high"] and 0 <= meta["gain_p_value"] <= 1
    assert 0 < meta["recall_ceiling"] <= 1 and len(meta["fold_choices"]) == 4

    block = meta["strategy_yaml"]
    assert block.startswith("```yaml\n") and block.endswith("\n```")
    entry = "\n".join(line for line in block.splitlines()[1:-1] if not line.lstrip().startswith("#"))
    (strategy,) = parse_registry(yaml.safe_load("strategies:\n" + entry)).values()
    assert strategy.version == meta["recommended_version"] == f"{POOL_STRATEGY}-tuned-ndcg_at_k"
    base = get_strategy(POOL_STRATEGY)
    assert (strategy.vector_candidate_k, strategy.keyword_candidate_k) == (base.vector_candidate_k,
                                                                           base.keyword_candidate_k)

    prefix = "![sweep](data:image/png;base64,"
    assert meta["sweep_chart"].startswith(prefix) and meta["sweep_chart"].endswith(")")
    assert base64.b64decode(meta["sweep_chart"][len(prefix):-1]).startswith(b"\x89PNG")
    table = meta["top_configurations"].splitlines()
    assert table[0].startswith("| # | configuration | nDCG@k |") and len(table) == 2 + 10
    assert "**recommended**" in table[2]
    assert meta["summary"]["pool_run_id"] == meta["pool_run_id"]


def test_fusion_sweep_without_a_pool_run_fails_naming_the_partition_to_materialise(dataset):
    result = _materialize(dataset.name, {"pool_strategy": "rrf-v1"})
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    message = failure.step_failure_data.user_failure_data.description
    assert f"no current succeeded run of strategy 'rrf-v1' on dataset '{dataset.name}'" in message
    assert f"materialise partition '{dataset.name}|rrf-v1' with job evaluate_retrieval" in message
    assert not [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_UP_FOR_RETRY]

    bad_metric = _materialize(dataset.name, {"metric": "accuracy"})
    assert not bad_metric.success


def test_tune_fusion_job_and_the_evaluate_retrieval_job_selection():
    defs = definitions.defs
    assert defs.resolve_job_def("tune_fusion").asset_layer.selected_asset_keys == {KEY}
    evaluate = defs.resolve_job_def("evaluate_retrieval").asset_layer.selected_asset_keys
    assert KEY not in evaluate and dg.AssetKey("strategy_comparison") not in evaluate
    assert dg.AssetKey("evaluation_run_summary") in evaluate
    spec = {s.key: s for s in defs.resolve_all_asset_specs()}[KEY]
    assert spec.group_name == "strategy_analysis" and "Tuned fusion" in (spec.description or "")
    assert spec.partitions_def.name == "dataset"
