"""The ``queued_evaluations`` sensor: the one owner of run state between the API's ``queued`` rows and Dagster. A
click's rows → one ``evaluate_strategies`` run request (run key: the click's queue id), requested once; the rows
carry the Dagster run's id once it exists; a Dagster run that ends before its rows started (failed, cancelled) or
while they run fails them with Dagster's reason; its ticks tell the API a daemon is there. Under a Celery run
launcher a click is a run per strategy, each claiming its own row."""

from __future__ import annotations

import uuid

import dagster as dg
import pytest
import sqlalchemy as sa

from rag_pipeline.definitions import defs
from rag_pipeline.defs.jobs import QUEUE_TAG, ROW_TAG, spreads_clicks
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.defs.sensors import comparison_after_evaluation, queued_evaluations
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.service import queued_runs
from rag_pipeline.service.datasets import register_dataset
from rag_pipeline.storage.engine import get_engine
from rag_pipeline_tests.defs.celery_extra import require_celery_extra
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, tiny_cases, write_dataset

KB = "eval-tiny-queue"
CELERY_LAUNCHER = {"module": "rag_pipeline.defs.workers.celery_launcher", "class": "RagCeleryRunLauncher",
                   "config": {"broker": "redis://127.0.0.1:9/0", "default_queue": "dagster"}}  # never reached here


@pytest.fixture(scope="module")
def chunks(engine, tmp_path_factory):
    return ingest_tiny_kb(engine, KB, tmp_path_factory.mktemp("kb"))


@pytest.fixture
def stored(engine, datasets, chunks):
    return register_dataset(engine, write_dataset(datasets / "tiny-queue.json", KB, tiny_cases(chunks)))


def _row(engine, run_id):
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT status, error, dagster_run_id FROM retrieval_evaluation_runs "
                                    "WHERE id = :id"), {"id": run_id}).one()


def _tick(instance):
    return queued_evaluations(dg.build_sensor_context(instance=instance, resources={"rag_db": RagDatabase()}))


def _requests(result, queue_id: str) -> list[dg.RunRequest]:
    return [r for r in result.run_requests if r.run_key == queue_id]


def test_a_click_is_requested_once_as_one_run_and_its_rows_carry_its_id(engine, stored):
    instance = dg.DagsterInstance.ephemeral()
    queued = queued_runs.queue_evaluations(engine, KB, stored.dataset_id, ["keyword-v1", "bm25-v1"])
    queue_id = queued.runs[0].dagster_run_id
    result = _tick(instance)
    assert queued_runs.queue_status(get_engine).daemon_running, "the tick is recorded"
    [request] = _requests(result, queue_id)
    assert request.run_config == {"ops": {"evaluate_click": {"config": {
        "dataset_id": stored.dataset_id, "runs": {r.strategy_version: r.run_id for r in queued.runs}}}}}
    assert request.tags[QUEUE_TAG] == queue_id and request.tags["rag/dataset"] == "tiny-queue"
    assert "tiny-queue" in result.dynamic_partitions_requests[0].partition_keys

    run = instance.create_run_for_job(defs.resolve_job_def("evaluate_strategies"), run_config=request.run_config,
                                      tags=request.tags)  # what the daemon does with the request
    assert not _requests(_tick(instance), queue_id), "requested once"
    assert {tuple(_row(engine, r.run_id)) for r in queued.runs} == {("queued", None, run.run_id)}
    instance.report_run_canceled(run)
    _tick(instance)
    for r in queued.runs:
        assert tuple(_row(engine, r.run_id)) == ("failed", f"its Dagster run {run.run_id} was cancelled before the "
                                                 "evaluation started (see the run in the Dagster UI)", run.run_id)


def test_a_run_that_fails_before_its_step_fails_its_rows_with_the_reason(engine, stored):
    instance = dg.DagsterInstance.ephemeral()
    [queued] = queued_runs.queue_evaluations(engine, KB, stored.dataset_id, ["keyword-v1"]).runs
    missing = str(uuid.uuid4())
    result = defs.resolve_job_def("evaluate_strategies").execute_in_process(
        instance=instance, raise_on_error=False, tags={QUEUE_TAG: queued.dagster_run_id},
        run_config={"ops": {"evaluate_click": {"config": {"dataset_id": missing,
                                                          "runs": {"keyword-v1": queued.run_id}}}}})
    assert not result.success
    assert _row(engine, queued.run_id).dagster_run_id == result.run_id, "the run's first step claims its rows"
    _tick(instance)
    status, error, _ = _row(engine, queued.run_id)
    assert status == "failed", error
    assert error.startswith(f"its Dagster run {result.run_id} failed before the evaluation started: "), error
    assert missing in error, error


def test_a_running_run_whose_dagster_run_failed_ends_failed_with_dagsters_reason(engine, stored):
    instance = dg.DagsterInstance.ephemeral()
    [queued] = queued_runs.queue_evaluations(engine, KB, stored.dataset_id, ["keyword-v1"]).runs
    result = defs.resolve_job_def("evaluate_strategies").execute_in_process(
        instance=instance, raise_on_error=False, tags={QUEUE_TAG: "no-such-click"},
        run_config={"ops": {"evaluate_click": {"config": {"dataset_id": str(uuid.uuid4()), "runs": {}}}}})
    with engine.connect() as conn:
        params_hash = conn.execute(sa.text("SELECT params_hash FROM retrieval_evaluation_runs WHERE id = :id"),
                                   {"id": queued.run_id}).scalar_one()
    run_records.start_queued_run(engine, queued.run_id, strategy_version="keyword-v1", params_hash=params_hash,
                                 dataset_id=stored.dataset_id, dagster_run_id=result.run_id)  # its step started
    _tick(instance)
    status, error, _ = _row(engine, queued.run_id)
    assert status == "failed" and error.startswith(f"its Dagster run {result.run_id} failed while the evaluation "
                                                   "was running: "), error


def test_under_the_celery_launcher_a_click_is_a_run_per_strategy_each_claiming_its_own_row(engine, stored):
    require_celery_extra()
    with dg.instance_for_test(overrides={"run_launcher": CELERY_LAUNCHER}) as instance:
        assert spreads_clicks(instance) and not spreads_clicks(dg.DagsterInstance.ephemeral())
        queued = queued_runs.queue_evaluations(engine, KB, stored.dataset_id, ["keyword-v1", "bm25-v1"])
        queue_id = queued.runs[0].dagster_run_id
        requests = {r.run_key: r for r in _tick(instance).run_requests if r.tags.get(QUEUE_TAG) == queue_id}
        assert sorted(requests) == sorted(f"{queue_id}/{r.strategy_version}" for r in queued.runs)
        for row in queued.runs:
            request = requests[f"{queue_id}/{row.strategy_version}"]
            assert request.run_config == {"ops": {"evaluate_click": {"config": {
                "dataset_id": stored.dataset_id, "runs": {row.strategy_version: row.run_id}}}}}
            assert request.tags[ROW_TAG] == row.run_id and request.tags["rag/evaluation_runs"] == "1"

        first, second = queued.runs
        run = instance.create_run_for_job(defs.resolve_job_def("evaluate_strategies"),
                                          run_config=requests[f"{queue_id}/{first.strategy_version}"].run_config,
                                          tags=requests[f"{queue_id}/{first.strategy_version}"].tags)
        again = [r.run_key for r in _tick(instance).run_requests if r.tags.get(QUEUE_TAG) == queue_id]
        assert again == [f"{queue_id}/{second.strategy_version}"], "the submitted strategy is not requested again"
        assert tuple(_row(engine, first.run_id)) == ("queued", None, run.run_id), "its own row only"
        assert tuple(_row(engine, second.run_id)) == ("queued", None, queue_id)
        instance.report_run_canceled(run)
        _tick(instance)
        assert _row(engine, first.run_id).status == "failed"
        assert tuple(_row(engine, second.run_id)) == ("queued", None, queue_id), "the other strategy still waits"


def test_a_spread_clicks_comparison_is_requested_once_its_last_run_has_ended(engine, stored):
    instance = dg.DagsterInstance.ephemeral()
    job = defs.resolve_job_def("evaluate_strategies")
    queue_id = str(uuid.uuid4())

    def spread_run(version: str):
        return job.execute_in_process(instance=instance, tags={QUEUE_TAG: queue_id, ROW_TAG: version,
                                                               "rag/dataset": "tiny-queue"},
                                      run_config={"ops": {"evaluate_click": {"config": {
                                          "dataset_id": stored.dataset_id, "runs": {version: ""}}}}})

    def after(result):
        return comparison_after_evaluation(dg.build_run_status_sensor_context(
            sensor_name="comparison_after_evaluation", dagster_instance=instance, dagster_run=result.dagster_run,
            dagster_event=result.get_run_success_event(), resources={"rag_db": RagDatabase()}))

    baseline, other = spread_run("hybrid-v1"), spread_run("keyword-v1")
    assert baseline.success and other.success
    waiting = instance.create_run_for_job(job, tags={QUEUE_TAG: queue_id, ROW_TAG: "bm25-v1"}, run_config={
        "ops": {"evaluate_click": {"config": {"dataset_id": stored.dataset_id, "runs": {"bm25-v1": ""}}}}})
    skip = after(other)  # bm25-v1 has not started
    assert isinstance(skip, dg.SkipReason) and skip.skip_message == "1 other run(s) of its click still to end"
    instance.report_run_canceled(waiting)
    for result in (baseline, other):  # whichever run is reported: one comparison for the click
        request = after(result)
        assert isinstance(request, dg.RunRequest), request
        assert (request.run_key, request.partition_key) == (f"compare:{queue_id}", "tiny-queue")
