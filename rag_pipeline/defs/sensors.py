"""The sensors (docs/evaluating.md, "Sensors"); run keys name the dataset version, never the file hash."""

import hashlib
import json

import dagster as dg

from rag_pipeline.contracts.knowledge_base import SHORT
from rag_pipeline.defs.comparison import compare_strategies_job
from rag_pipeline.defs.evaluation_metadata import display_float
from rag_pipeline.defs.jobs import QUEUE_TAG, ROW_TAG, evaluate_retrieval_job, evaluate_strategies, spreads_clicks
from rag_pipeline.defs.partitions import DATASETS, dataset_partitions, partition_key, strategy_partitions
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.evaluation.datasets.load import MAX_FILE_BYTES, valid_dataset_key
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.service import analysis, datasets, history, lineage, queued_runs
from rag_pipeline.settings import datasets_dir
from rag_pipeline.storage.files import FileReadError, check_regular, read_bounded
from rag_pipeline.storage.names import DATASET, name_rule, printable
from rag_pipeline.storage.urls import DatabaseError, mask_secrets

OPT_IN = '"metadata": {"auto_evaluate": true}'
SENSOR_DESCRIPTION = (
    f"A new or changed datasets/*.json whose object form says {OPT_IN} → add its dataset partition and launch "
    "one evaluate_retrieval run per strategy its knowledge base can run (the file's metadata.strategies, else "
    "RAG_SENSOR_STRATEGIES, else every registry strategy) that has not measured this dataset version yet. Any "
    "other file (e.g. one `rag-pipeline label --output` wrote) is left alone: no partition, no run.")


def read_dataset_file(path) -> tuple[bytes, str]:
    """A dataset file's bytes and SHA-256, read through the bounded reader (a FIFO or device never blocks)."""
    raw = read_bounded(path, MAX_FILE_BYTES, what="the dataset file")
    return raw, hashlib.sha256(raw).hexdigest()


def opts_in(raw: bytes) -> bool | str:
    """Whether a dataset file asks to be evaluated automatically (``metadata.auto_evaluate`` true): a file that
    is not JSON is True (its validation says what is wrong), a flag that is not a boolean the problem as text."""
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except ValueError:
        return True
    metadata = data.get("metadata") if isinstance(data, dict) else None
    flag = metadata.get("auto_evaluate", False) if isinstance(metadata, dict) else False
    if not isinstance(flag, bool):
        return f"field 'metadata.auto_evaluate': must be true or false, got {json.dumps(flag)[:40]}"
    return flag


@dg.sensor(name="new_dataset_sensor", job=evaluate_retrieval_job, minimum_interval_seconds=30,
           default_status=dg.DefaultSensorStatus.RUNNING, description=SENSOR_DESCRIPTION)
def new_dataset_sensor(context: dg.SensorEvaluationContext, rag_db: RagDatabase):
    folder = datasets_dir()
    previous: dict = json.loads(context.cursor) if context.cursor else {}
    cursor: dict = {}
    new_keys: list[str] = []
    requests: list[dg.RunRequest] = []
    problems: list[str] = []
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    for path in files:
        key = path.stem
        if not valid_dataset_key(key):
            context.log.warning(f"ignoring {printable(path.name)}: {name_rule(DATASET)}")
            continue
        try:
            stat = check_regular(path)  # a FIFO, device or dangling link must never block the sensor
            seen = previous.get(key)
            if seen and (seen["mtime_ns"], seen["size"]) == (stat.st_mtime_ns, stat.st_size):
                cursor[key] = seen
                continue
            raw, digest = read_dataset_file(path)
        except FileReadError as exc:
            context.log.warning(f"ignoring {printable(path.name)}: {exc}")
            continue
        if seen and seen["sha256"] == digest:
            cursor[key] = {"mtime_ns": stat.st_mtime_ns, "size": stat.st_size, "sha256": digest}
            continue  # touched, same content
        wanted = opts_in(raw)
        if wanted is not True:
            cursor[key] = {"mtime_ns": stat.st_mtime_ns, "size": stat.st_size, "sha256": digest}
            if wanted:  # a flag that is not a boolean
                context.log.warning(f"not evaluating {printable(path.name)}: {wanted}")
                problems.append(f"{printable(path.name)}: {wanted}")
            else:
                context.log.info(f"not evaluating {printable(path.name)}: it does not opt in with {OPT_IN}")
            continue
        try:
            plan = datasets.plan_dataset_runs(rag_db.engine(), path)
        except DatabaseError as exc:  # try again next tick: the file stays "unseen"
            context.log.warning(f"cannot plan {path.name}: {exc}")
            problems.append(f"{path.name}: {exc}")
            continue
        cursor[key] = {"mtime_ns": stat.st_mtime_ns, "size": stat.st_size, "sha256": digest}
        if plan.problems:
            context.log.warning(f"not evaluating {printable(path.name)}: {plan.problems}")
            problems.append(printable(plan.problems))
            continue
        if key not in new_keys and not context.instance.has_dynamic_partition(DATASETS, key):
            new_keys.append(key)
        context.log.info(f"{'changed' if seen else 'new'} dataset file {path.name} (dataset version "
                         f"{plan.dataset_version}): running {', '.join(plan.to_run) or 'nothing'}")
        for version, reason in plan.skipped.items():
            context.log.info(f"{path.name}: not running {version}: {reason}")
        requests += [
            dg.RunRequest(run_key=f"{path.name}:{plan.dataset_version}:{version}",
                          partition_key=partition_key(key, version), tags={"rag/dataset_file": path.name})
            for version in plan.to_run
        ]
    for gone in sorted(set(previous) - set(cursor) - {k for k in previous if not valid_dataset_key(k)}):
        context.log.info(f"dataset file {gone}.json disappeared (its partition and runs are kept)")
    partitions = [dataset_partitions.build_add_request(new_keys)] if new_keys else []
    reason = ("invalid dataset file(s), nothing launched:\n" + "\n".join(problems)) if problems else \
        f"no new or changed dataset file that opts in ({OPT_IN}) to run in {folder} ({len(files)} watched)"
    return dg.SensorResult(run_requests=requests, skip_reason=None if requests else reason,
                           dynamic_partitions_requests=partitions, cursor=json.dumps(cursor, sort_keys=True))


@dg.run_status_sensor(
    name="comparison_after_evaluation",
    run_status=dg.DagsterRunStatus.SUCCESS,
    monitored_jobs=[evaluate_retrieval_job, evaluate_strategies],
    request_job=compare_strategies_job,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="A succeeded evaluate_retrieval or evaluate_strategies run (the last to end of a click spread as a "
                "run per strategy) → re-materialise strategy_comparison for its dataset, once the baseline and at "
                "least one other strategy have a run on the dataset's latest version.",
)
def comparison_after_evaluation(context: dg.RunStatusSensorContext, rag_db: RagDatabase):
    tags = context.dagster_run.tags  # evaluate_strategies runs (several partitions) name their dataset
    dataset = tags.get("rag/dataset") or tags.get("dagster/partition", "").split("|")[0]
    if not dataset:
        return dg.SkipReason("the run has no dataset partition")
    try:
        ready = analysis.comparison_ready(rag_db.engine(), dataset)
    except DatabaseError as exc:
        return dg.SkipReason(f"cannot check dataset {dataset!r}: {exc}")
    if ready is not True:
        return dg.SkipReason(str(ready))
    if ROW_TAG in tags:  # a click spread as a run per strategy: one comparison, once its last run has ended
        siblings = context.instance.get_runs(filters=dg.RunsFilter(tags={QUEUE_TAG: tags[QUEUE_TAG]}))
        if running := [r.run_id for r in siblings if not r.is_finished]:
            return dg.SkipReason(f"{len(running)} other run(s) of its click still to end")
        return dg.RunRequest(run_key=f"compare:{tags[QUEUE_TAG]}", partition_key=dataset)
    return dg.RunRequest(run_key=f"compare:{context.dagster_run.run_id}", partition_key=dataset)


@dg.sensor(
    name="runs_outside_dagster",
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Evaluation runs made outside Dagster (rag-pipeline evaluate, the service, the API) → a runless "
                "materialization of their dataset|strategy partition, so the UI's plots and history include them "
                "(the dataset partition is added only when its file is in datasets/).",
)
def runs_outside_dagster(context: dg.SensorEvaluationContext, rag_db: RagDatabase):
    try:
        finished = history.runs_outside_dagster(rag_db.engine(), context.cursor)
    except DatabaseError as exc:
        return dg.SkipReason(f"cannot read the evaluation runs: {exc}")
    if not finished:
        return dg.SkipReason("no new evaluation run made outside Dagster")
    strategies = set(strategy_partitions.get_partition_keys())
    folder = datasets_dir()
    events, new_keys = [], []
    for run in finished:
        if not valid_dataset_key(run.dataset) or run.strategy_version not in strategies:
            context.log.info(f"run {run.run_id}: {run.dataset}|{run.strategy_version} is not a partition; not reported")
            continue
        if run.dataset not in new_keys and not context.instance.has_dynamic_partition(DATASETS,
                                                                                      run.dataset):
            if not (folder / f"{run.dataset}.json").is_file():  # a partition's run reads datasets/<name>.json
                context.log.info(f"run {run.run_id}: dataset {run.dataset!r} has no file in {folder}; no partition "
                                 "added, not reported")
                continue
            new_keys.append(run.dataset)
        events.append(dg.AssetMaterialization(
            asset_key="evaluation_run_summary", partition=f"{run.dataset}|{run.strategy_version}",
            description=f"evaluation run {run.run_id} made outside Dagster",
            metadata={**{m: display_float(v) for m, v in run.averages.items()},
                      "run_id": run.run_id, "dataset_version": run.dataset_version,
                      "knowledge_base": run.knowledge_base, "params_hash": run.params_hash,
                      "knowledge_base_version": run.knowledge_base_version or "",
                      "dagster/row_count": run.case_count, "candidates": run.candidate_count,
                      "source": "outside Dagster (CLI, service or API)"}))
    return dg.SensorResult(asset_events=events, cursor=finished[-1].cursor,
                           dynamic_partitions_requests=[dataset_partitions.build_add_request(new_keys)] if new_keys
                           else [])


@dg.sensor(
    name="reevaluate_stale_runs", job=evaluate_retrieval_job, minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Opt-in (stopped by default): a current evaluation run that measured an older version of its "
                "knowledge base than the one it has now → re-evaluate its dataset|strategy partition.",
)
def reevaluate_stale_runs(context: dg.SensorEvaluationContext, rag_db: RagDatabase):
    try:
        stale = lineage.stale_runs(rag_db.engine())
    except DatabaseError as exc:
        return dg.SkipReason(f"cannot read the evaluation runs: {exc}")
    partitions = set(context.instance.get_dynamic_partitions(DATASETS))
    strategies = set(strategy_partitions.get_partition_keys())
    folder = datasets_dir()
    requests = []
    for run in stale:
        if not (valid_dataset_key(run.dataset) and run.dataset in partitions and run.strategy_version in strategies
                and (folder / f"{run.dataset}.json").is_file()):
            continue  # not a partition this code location can run (or its file is gone)
        requests.append(dg.RunRequest(
            run_key=f"reevaluate:{run.dataset}:{run.strategy_version}:{run.current_version}",
            partition_key=partition_key(run.dataset, run.strategy_version),
            tags={"rag/trigger": "reevaluate_stale_runs", "rag/knowledge_base_version": run.current_version[:SHORT]}))
    if not requests:
        return dg.SkipReason(f"no current run is out of date ({len(stale)} stale outside the partitions)"
                             if stale else "every current run measured its knowledge base's current version")
    return requests


_ENDED = {"FAILURE": "failed", "CANCELED": "was cancelled", "SUCCESS": "succeeded"}  # DagsterRunStatus names


def failure_reasons(instance: dg.DagsterInstance, dagster_run_id: str) -> dict[str | None, str]:
    """The one-line reason Dagster logged for each failed step of a run (key: the step key; None: the last failure
    logged with an error, the run's own or a step's): the innermost error, ``Type: message``."""
    entries = instance.all_logs(dagster_run_id, of_type={dg.DagsterEventType.STEP_FAILURE,
                                                         dg.DagsterEventType.RUN_FAILURE})
    reasons: dict[str | None, str] = {}
    for entry in entries:
        error = getattr(getattr(entry.dagster_event, "event_specific_data", None), "error", None)
        while error is not None and getattr(error, "cause", None) is not None:
            error = error.cause  # Dagster wraps the op's exception: the cause is ours
        lines = [line.strip() for line in (getattr(error, "message", "") or "").splitlines() if line.strip()]
        if lines:
            reasons[entry.step_key] = reasons[None] = mask_secrets("; ".join(lines))[:2000]
    return reasons


def how_it_ended(instance: dg.DagsterInstance, record: dg.DagsterRun, when: str) -> str | None:
    """"failed <when>: <its reason>", "was cancelled <when> (see ...)" for a Dagster run that has ended (None: it has
    not)."""
    verb = _ENDED.get(record.status.name)
    if verb is None:
        return None
    reasons = failure_reasons(instance, record.run_id) if record.status.name == "FAILURE" else {}
    why = reasons.get(None)
    return f"{verb} {when}" + (f": {why}" if why else " (see the run in the Dagster UI)")


def click_request(queue_id: str, runs: list, *, spread: bool = False) -> dg.RunRequest:
    """The ``evaluate_strategies`` run of the queued runs of one click (one stored dataset version); ``spread``: of
    the one queued run ``runs[0]`` of a click spread as a run per strategy (run key ``<queue id>/<strategy>``)."""
    config = {"dataset_id": runs[0].dataset_id, "runs": {r.strategy_version: r.run_id for r in runs}}
    tags = {"rag/dataset": runs[0].dataset, "rag/evaluation_runs": str(len(runs)), "rag/source": "http-api",
            QUEUE_TAG: queue_id}
    return dg.RunRequest(run_key=f"{queue_id}/{runs[0].strategy_version}" if spread else queue_id,
                         run_config={"ops": {"evaluate_click": {"config": config}}},
                         tags={**tags, ROW_TAG: runs[0].run_id} if spread else tags)


@dg.sensor(
    # 1 s: evaluated on every pass of the daemon's sensor loop (Dagster's loop comes round every 5 s; with a 5 s
    # minimum a pass landing a moment early skipped the click to the next one, 10 s after the last tick)
    name=queued_runs.SENSOR, job=evaluate_strategies, minimum_interval_seconds=1,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="The queued evaluation runs of a click (HTTP API, console) → one evaluate_strategies run (its "
                "strategies at once in one step; a run per strategy when runs go to Celery workers); a queued or "
                "running evaluation run "
                "whose Dagster run ended first (or whose heartbeat fell silent) → failed with the reason. Its ticks "
                "tell the API whether a daemon picks queued runs up.",
)
def queued_evaluations(context: dg.SensorEvaluationContext, rag_db: RagDatabase):
    engine, instance = rag_db.engine(), context.instance
    try:
        queued_runs.record_tick(engine)
        clicks: dict[str, list] = {}
        for run in queued_runs.queued_runs(engine):
            clicks.setdefault(run.dagster_run_id, []).append(run)
        found = {r.run_id: r for r in instance.get_runs(filters=dg.RunsFilter(run_ids=list(clicks)))} if clicks \
            else {}
        by_row: dict[str, dg.DagsterRun] = {}  # a spread click's run of each of its rows
        if rest := [i for i in clicks if i not in found]:
            for tagged in instance.get_runs(filters=dg.RunsFilter(tags={QUEUE_TAG: rest})):
                if row := tagged.tags.get(ROW_TAG):
                    by_row[row] = tagged
                else:
                    found[tagged.tags[QUEUE_TAG]] = tagged
        requests, datasets_to_add, failed = [], set(), 0
        spread = spreads_clicks(instance)
        for queue_id, runs in clicks.items():
            carried: dict[str, tuple[dg.DagsterRun, list]] = {}  # Dagster run id → it, the rows it carries out
            waiting = []
            for run in runs:
                if (record := by_row.get(run.run_id) or found.get(queue_id)) is None:
                    waiting.append(run)
                else:
                    carried.setdefault(record.run_id, (record, []))[1].append(run)
            if waiting:
                requests += [click_request(queue_id, [r], spread=True) for r in waiting] if spread else \
                    [click_request(queue_id, waiting)]
                if not instance.has_dynamic_partition(DATASETS, waiting[0].dataset):
                    datasets_to_add.add(waiting[0].dataset)
            for dagster_run_id, (record, rows) in carried.items():
                if dagster_run_id != queue_id:  # submitted: its rows carry the Dagster run's id from now on
                    queued_runs.claim(engine, queue_id, dagster_run_id, [r.run_id for r in rows])
                for run in rows if record.status.name in _ENDED else ():
                    what = how_it_ended(instance, record, "before the evaluation started")
                    run_records.mark_failed(engine, run.run_id, f"its Dagster run {record.run_id} {what}")
                    failed += 1

        def ended(dagster_run_ids) -> dict[str, str]:
            records = instance.get_runs(filters=dg.RunsFilter(run_ids=list(dagster_run_ids)))
            return {r.run_id: what for r in records
                    if (what := how_it_ended(instance, r, "while the evaluation was running"))}

        failed += queued_runs.end_gone_runs(engine, ended)
    except DatabaseError as exc:
        return dg.SkipReason(f"cannot read the evaluation runs: {exc}")
    if failed:
        context.log.warning(f"{failed} evaluation run(s) failed: their Dagster run ended or their process went silent")
    return dg.SensorResult(
        run_requests=requests, skip_reason=None if requests else f"no new click to run ({failed} run(s) failed)",
        dynamic_partitions_requests=[dataset_partitions.build_add_request(sorted(datasets_to_add))]
        if datasets_to_add else [])
