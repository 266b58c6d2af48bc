"""Create and queue one ``evaluate_strategies`` Dagster run for the runs of a click, and read back why a Dagster
run (or one strategy's step of it) failed (docs/http-api.md, "Evaluations are asynchronous").

The run is created from the code location ``rag_pipeline.definitions`` loaded in this process once (what
``dagster job launch`` would load in a subprocess per run) and handed to the instance's run coordinator: with
the ``QueuedRunCoordinator`` the daemon dequeues it and the instance's run launcher (the default one, or the
``CeleryRunLauncher`` of deploy/celery/README.md) starts its run worker, so nothing is evaluated here. Dagster is
imported inside the functions only (importing :mod:`rag_pipeline.web` does not load it).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from rag_pipeline.contracts.runs import QueuedRun
from rag_pipeline.storage.urls import mask_secrets

JOB = "evaluate_strategies"
FIRST_STEP = "stored_dataset"  # the op of JOB whose config names the dataset version and the runs
CODE_MODULE = "rag_pipeline.definitions"


class CodeLocationError(RuntimeError):
    """The code location cannot be loaded; the message is its last error line."""


def load_workspace(instance, dagster_home: Path):
    """The Dagster workspace of :data:`CODE_MODULE`, loaded in this process (raises :class:`CodeLocationError`)."""
    from dagster._core.remote_origin import InProcessCodeLocationOrigin  # noqa: PLC0415 - see the module docstring
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin  # noqa: PLC0415
    from dagster._core.workspace.context import WorkspaceProcessContext  # noqa: PLC0415
    from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget  # noqa: PLC0415

    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(executable_path=sys.executable, module_name=CODE_MODULE,
                             working_directory=str(dagster_home)), location_name=CODE_MODULE)
    context = WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget(origin))
    error = context.create_request_context().get_code_location_error(CODE_MODULE)
    if error is not None:
        context.__exit__(None, None, None)
        lines = [line for line in (error.message or "").splitlines() if line.strip()] or ["(no message)"]
        raise CodeLocationError(f"cannot load the Dagster code location {CODE_MODULE}: "
                                f"{mask_secrets(lines[-1].strip())}")
    return context


def submit_strategies_run(instance, workspace, runs: Sequence[QueuedRun]) -> None:
    """Create one :data:`JOB` run for ``runs`` (one stored dataset version, one Dagster run id) and submit it to
    the instance's run coordinator (what ``dagster job launch`` does, without its subprocess)."""
    from dagster._core.definitions.selector import JobSubsetSelector  # noqa: PLC0415

    first = runs[0]
    config = {"ops": {FIRST_STEP: {"config": {"dataset_id": first.dataset_id,
                                              "runs": {r.strategy_version: r.run_id for r in runs}}}}}
    tags = {"rag/dataset": first.dataset, "rag/evaluation_runs": str(len(runs)), "rag/source": "http-api"}
    context = workspace.create_request_context()
    location = context.get_code_location(CODE_MODULE)
    repo = next(iter(location.get_repositories().values()))
    job = location.get_job(JobSubsetSelector(location_name=CODE_MODULE, repository_name=repo.name, job_name=JOB,
                                             op_selection=None))
    plan = location.get_execution_plan(job, config, step_keys_to_execute=None, known_state=None, instance=instance)
    instance.create_run(job_name=JOB, run_id=first.dagster_run_id, run_config=config, resolved_op_selection=None,
                        step_keys_to_execute=None, op_selection=None, status=None, root_run_id=None,
                        parent_run_id=None, tags={**job.tags, **tags}, job_snapshot=job.job_snapshot,
                        execution_plan_snapshot=plan.execution_plan_snapshot,
                        parent_job_snapshot=job.parent_job_snapshot, remote_job_origin=job.get_remote_origin(),
                        job_code_origin=job.get_python_origin(), asset_selection=None, asset_check_selection=None,
                        asset_graph=repo.asset_graph)
    instance.submit_run(first.dagster_run_id, context)


def failure_reasons(instance, dagster_run_id: str) -> dict[str | None, str]:
    """The one-line reason Dagster logged for each failed step of a run (key: the step key; None: the last failure
    logged with an error, the run's own or a step's): the innermost error, ``Type: message``. Raises when the event log
    cannot be read."""
    import dagster as dg  # noqa: PLC0415

    entries = instance.all_logs(dagster_run_id, of_type={dg.DagsterEventType.STEP_FAILURE,
                                                         dg.DagsterEventType.RUN_FAILURE})
    reasons: dict[str | None, str] = {}
    for entry in entries:
        error = getattr(getattr(entry.dagster_event, "event_specific_data", None), "error", None)
        while error is not None and getattr(error, "cause", None) is not None:
            error = error.cause  # Dagster wraps the op's exception: the cause is ours
        lines = [line.strip() for line in (getattr(error, "message", "") or "").splitlines() if line.strip()]
        if lines:
            reason = mask_secrets("; ".join(lines))[:2000]
            if step := getattr(entry, "step_key", None):
                reasons[step] = reason
            reasons[None] = reason
    return reasons
