"""Evaluation runs through Dagster: queue the run rows, submit one ``evaluate_strategies`` run per click (a step
per strategy; in a background thread) to the instance's run queue, say whether a daemon will pick it up, and fail
the queued runs whose Dagster run ended before they started (docs/http-api.md, "Evaluations are asynchronous").

The run is created and queued in this process (the code location loaded here once, as ``dagster job launch``
would load it in a subprocess); the daemon dequeues it and the instance's run launcher starts it in a run
worker, so nothing is evaluated in the API's process. The only module of :mod:`rag_pipeline.web` that uses
dagster, imported where the instance is opened. One :class:`Launcher` per app (``app.state.launcher``); the
Dagster environment is resolved once and passed to each subprocess as its ``env``, this process's
``os.environ`` is never changed.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from rag_pipeline.service.database import dagster_database_url, mask_secrets
from rag_pipeline.service.queued_runs import QueuedEvaluation, QueuedRun, fail_queued, queue_evaluations, queued_runs
from rag_pipeline.settings import project_root

JOB = "evaluate_strategies"
FIRST_STEP = "stored_dataset"  # the op of JOB whose config names the dataset version and the runs
CODE_MODULE = "rag_pipeline.definitions"
DATASET_PARTITIONS = "dataset"
DAEMON_TYPE = "QUEUED_RUN_COORDINATOR"
HEARTBEAT_TOLERANCE_S = 120
LAUNCH_TIMEOUT_S = 300
RECONCILE_PERIOD_S = 2.0
NO_DAEMON_FIX = ("start `make dev` (the Dagster UI and its daemon) or `rag-pipeline serve --with-daemon`, on the "
                 "same DAGSTER_HOME")
log = logging.getLogger("rag_pipeline.web.launcher")


@dataclass(frozen=True)
class QueueStatus:
    """Whether a Dagster daemon is picking up queued runs; ``message``: why not, with the fix."""

    daemon_running: bool
    message: str | None = None


class LaunchError(RuntimeError):
    """The Dagster instance cannot be used (no DAGSTER_HOME, storage unreachable); the message says what to do."""


def dagster_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of ``environ`` (default: this process's) completed with ``DAGSTER_HOME`` (else the project folder
    when it holds ``dagster.yaml``) and ``RAG_DAGSTER_PG_URL`` (else the database settings')."""
    env = dict(os.environ if environ is None else environ)
    if not env.get("DAGSTER_HOME"):
        root = project_root()
        if not (root / "dagster.yaml").is_file():
            raise LaunchError("DAGSTER_HOME is not set and the project folder has no dagster.yaml: run "
                              "`rag-pipeline db start` in the project (it writes .env) or export DAGSTER_HOME")
        env["DAGSTER_HOME"] = str(root)
    if not env.get("RAG_DAGSTER_PG_URL"):
        env["RAG_DAGSTER_PG_URL"] = dagster_database_url()
    return env


_FINISHED = {"FAILURE": "failed", "CANCELED": "was cancelled", "SUCCESS": "succeeded"}  # DagsterRunStatus names


class Launcher:
    """Submits evaluation runs to one Dagster instance and watches its queue. ``env``: the environment of Dagster's
    processes (default: :func:`dagster_environment`, on first use)."""

    def __init__(self, env: Mapping[str, str] | None = None):
        self._env = dict(env) if env is not None else None
        self._lock = threading.Lock()
        self._reconciling = threading.Lock()
        self._instance = None  # the dagster.DagsterInstance, opened by instance()
        self._workspace = None  # the dagster WorkspaceProcessContext of CODE_MODULE, loaded by workspace()
        self._status: tuple[float, QueueStatus] | None = None

    def environment(self) -> dict[str, str]:
        """The environment every Dagster subprocess gets (resolved once; raises :class:`LaunchError`)."""
        if self._env is None:
            self._env = dagster_environment()
        return self._env

    def dagster_home(self) -> Path:
        return Path(self.environment()["DAGSTER_HOME"])

    def instance(self):
        """The ``dagster.DagsterInstance`` of ``DAGSTER_HOME`` (opened once). Dagster reads ``DAGSTER_HOME`` and
        ``RAG_DAGSTER_PG_URL`` from the process environment: ``rag-pipeline serve`` starts with them there."""
        import dagster as dg  # noqa: PLC0415 - Dagster only when the launcher is used (the app loads without it)

        with self._lock:
            if self._instance is None:
                home = self.environment()["DAGSTER_HOME"]
                try:
                    self._instance = dg.DagsterInstance.get()
                except Exception as exc:  # noqa: BLE001 - any set-up failure becomes one line for the user
                    first = mask_secrets(str(exc)).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                    raise LaunchError(f"cannot open the Dagster instance of DAGSTER_HOME={home}: {first}") from None
            return self._instance

    def launch_evaluations(self, engine: sa.Engine, knowledge_base: str, dataset_id: str,
                           strategy_versions: Sequence[str] | None = None, *, strict: bool = False
                           ) -> QueuedEvaluation:
        """Queue one evaluation run per strategy (default: every strategy the knowledge base can run) of a stored
        dataset version and submit each to Dagster in the background."""
        inst = self.instance()  # fails before anything is queued when the instance cannot be used
        self.reconcile(engine)
        queued = queue_evaluations(engine, knowledge_base, dataset_id, strategy_versions, strict=strict)
        try:
            name = queued.runs[0].dataset
            if not inst.has_dynamic_partition(DATASET_PARTITIONS, name):
                inst.add_dynamic_partitions(DATASET_PARTITIONS, [name])
        except Exception as exc:
            for run in queued.runs:
                fail_queued(engine, run.run_id, f"could not add the Dagster partition: {exc}")
            raise
        threading.Thread(target=self._submit_all, args=(engine, queued.runs), name="rag-launch", daemon=True).start()
        return queued

    def _submit_all(self, engine: sa.Engine, runs: Sequence[QueuedRun]) -> None:
        try:
            self._submit(runs)
        except Exception as exc:  # noqa: BLE001 - the run rows record why; the server keeps going
            log.warning("submitting Dagster run %s failed: %s", runs[0].dagster_run_id, exc)
            for run in runs:
                fail_queued(engine, run.run_id, f"submitting the Dagster run failed: {mask_secrets(str(exc))}")

    def _child_environment(self) -> dict[str, str]:
        env = dict(self.environment())
        env.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")  # dagster 1.13's supersession notice
        return env

    def workspace(self):
        """The Dagster workspace of the code location ``rag_pipeline.definitions``, loaded in this process once
        (only its name travels with a run: the daemon launches it from its own copy of the location)."""
        from dagster._core.remote_origin import InProcessCodeLocationOrigin  # noqa: PLC0415 - see instance()
        from dagster._core.types.loadable_target_origin import LoadableTargetOrigin  # noqa: PLC0415
        from dagster._core.workspace.context import WorkspaceProcessContext  # noqa: PLC0415
        from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget  # noqa: PLC0415

        inst = self.instance()
        with self._lock:
            if self._workspace is None:
                origin = InProcessCodeLocationOrigin(
                    LoadableTargetOrigin(executable_path=sys.executable, module_name=CODE_MODULE,
                                         working_directory=str(self.dagster_home())), location_name=CODE_MODULE)
                context = WorkspaceProcessContext(inst, InProcessWorkspaceLoadTarget(origin))
                error = context.create_request_context().get_code_location_error(CODE_MODULE)
                if error is not None:  # not kept: the next click loads the code again
                    context.__exit__(None, None, None)
                    lines = [line for line in (error.message or "").splitlines() if line.strip()] or ["(no message)"]
                    raise LaunchError(f"cannot load the Dagster code location {CODE_MODULE}: "
                                      f"{mask_secrets(lines[-1].strip())}")
                self._workspace = context
            return self._workspace

    def load_code_in_background(self) -> None:
        """Load :meth:`workspace` in a background thread now (``rag-pipeline serve`` calls this at start), so the
        first click does not wait for it; a failure is logged and retried by the first click."""
        def load() -> None:
            try:
                self.workspace()
            except Exception as exc:  # noqa: BLE001 - the first submission reports it in its run rows
                log.warning("could not load the Dagster code location %s: %s", CODE_MODULE, exc)

        threading.Thread(target=load, name="rag-code-location", daemon=True).start()

    def _submit(self, runs: Sequence[QueuedRun]) -> None:
        """Create one ``evaluate_strategies`` run for ``runs`` (one stored dataset version, one Dagster run id)
        and put it in the instance's run queue (what ``dagster job launch`` does, without its subprocess)."""
        from dagster._core.definitions.selector import JobSubsetSelector  # noqa: PLC0415 - see instance()

        first, inst = runs[0], self.instance()
        config = {"ops": {FIRST_STEP: {"config": {"dataset_id": first.dataset_id,
                                                  "runs": {r.strategy_version: r.run_id for r in runs}}}}}
        tags = {"rag/dataset": first.dataset, "rag/evaluation_runs": str(len(runs)), "rag/source": "http-api"}
        context = self.workspace().create_request_context()
        location = context.get_code_location(CODE_MODULE)
        repo = next(iter(location.get_repositories().values()))
        job = location.get_job(JobSubsetSelector(location_name=CODE_MODULE, repository_name=repo.name, job_name=JOB,
                                                   op_selection=None))
        plan = location.get_execution_plan(job, config, step_keys_to_execute=None, known_state=None, instance=inst)
        inst.create_run(job_name=JOB, run_id=first.dagster_run_id, run_config=config, resolved_op_selection=None,
                        step_keys_to_execute=None, op_selection=None, status=None, root_run_id=None,
                        parent_run_id=None, tags={**job.tags, **tags}, job_snapshot=job.job_snapshot,
                        execution_plan_snapshot=plan.execution_plan_snapshot,
                        parent_job_snapshot=job.parent_job_snapshot, remote_job_origin=job.get_remote_origin(),
                        job_code_origin=job.get_python_origin(), asset_selection=None, asset_check_selection=None,
                        asset_graph=repo.asset_graph)
        inst.submit_run(first.dagster_run_id, context)

    def queue_status(self, max_age_s: float = 5.0) -> QueueStatus:
        """Is a Dagster daemon picking up queued runs? (its queue heartbeat is fresher than 2 minutes). Cached for
        ``max_age_s`` seconds. Never raises: a broken instance is reported in ``message``."""
        now = time.monotonic()
        cached = self._status
        if cached and now - cached[0] < max_age_s:
            return cached[1]
        try:
            beat = self.instance().get_daemon_heartbeats().get(DAEMON_TYPE)
            alive = beat is not None and time.time() - beat.timestamp < HEARTBEAT_TOLERANCE_S
            status = QueueStatus(True) if alive else QueueStatus(False, (
                f"no Dagster daemon is running on DAGSTER_HOME={self.dagster_home()}: queued evaluation runs wait "
                f"until one starts — {NO_DAEMON_FIX}"))
        except LaunchError as exc:
            status = QueueStatus(False, str(exc))
        except Exception as exc:  # noqa: BLE001 - the storage went away: say so, never fail the caller
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            status = QueueStatus(False, f"the Dagster instance cannot be read ({mask_secrets(first)}): queued "
                                        "runs cannot start; check the database (`rag-pipeline db status`)")
        self._status = (now, status)
        return status

    def reconcile(self, engine: sa.Engine) -> int:
        """Mark failed every ``queued`` run whose Dagster run already ended (failed, cancelled) before the
        evaluation started; returns how many. Skipped while another call runs; never raises."""
        if not self._reconciling.acquire(blocking=False):
            return 0
        try:
            return self._reconcile(engine)
        except Exception as exc:  # noqa: BLE001 - best effort; the next call retries
            log.warning("could not reconcile queued runs with Dagster: %s", exc)
            return 0
        finally:
            self._reconciling.release()

    def _reconcile(self, engine: sa.Engine) -> int:
        waiting = [r for r in queued_runs(engine) if r.dagster_run_id]
        if not waiting:
            return 0
        by_id: dict[str, list] = {}  # one Dagster run carries every run of a click
        for run in waiting:
            by_id.setdefault(run.dagster_run_id, []).append(run)
        ended = 0
        import dagster as dg  # noqa: PLC0415 - Dagster only when the launcher is used (the app loads without it)

        records = self.instance().get_runs(filters=dg.RunsFilter(run_ids=list(by_id)))
        for record in records:
            verb = _FINISHED.get(record.status.name)
            if verb:
                why = self._failure_reason(record.run_id) if record.status.name == "FAILURE" else None
                for run in by_id[record.run_id]:
                    fail_queued(engine, run.run_id, f"its Dagster run {record.run_id} {verb} before the "
                                "evaluation started" + (f": {why}" if why else " (see the run in the Dagster UI)"))
                    ended += 1
        cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=2 * LAUNCH_TIMEOUT_S)
        for dagster_run_id in set(by_id) - {r.run_id for r in records}:
            for run in by_id[dagster_run_id]:
                if run.queued_at is not None and run.queued_at < cutoff:  # its submission never reached Dagster
                    fail_queued(engine, run.run_id, f"its Dagster run {dagster_run_id} was never created (the "
                                "server stopped before submitting it?); evaluate again")
                    ended += 1
        return ended

    def _failure_reason(self, dagster_run_id: str) -> str | None:
        """The one-line reason Dagster logged for a failed run: the innermost error of its last step (or run)
        failure, ``Type: message``; None when the event log has none or cannot be read."""
        try:
            import dagster as dg  # noqa: PLC0415

            entries = self.instance().all_logs(dagster_run_id, of_type={dg.DagsterEventType.STEP_FAILURE,
                                                                        dg.DagsterEventType.RUN_FAILURE})
        except Exception as exc:  # noqa: BLE001 - the generic wording is kept
            log.warning("could not read the Dagster event log of run %s: %s", dagster_run_id, exc)
            return None
        for entry in reversed(entries):
            error = getattr(getattr(entry.dagster_event, "event_specific_data", None), "error", None)
            while error is not None and getattr(error, "cause", None) is not None:
                error = error.cause  # Dagster wraps the op's exception: the cause is ours
            lines = [line.strip() for line in (getattr(error, "message", "") or "").splitlines() if line.strip()]
            if lines:
                return mask_secrets("; ".join(lines))[:2000]
        return None

    def start_daemon(self, log_path: Path | None = None) -> subprocess.Popen:
        """Start ``dagster-daemon run -m rag_pipeline.definitions`` on this DAGSTER_HOME (what ``serve
        --with-daemon`` does when no daemon is alive); the caller stops it."""
        env = self._child_environment()
        out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
        return subprocess.Popen([str(Path(sys.executable).with_name("dagster-daemon")), "run", "-m", CODE_MODULE],
                                cwd=env["DAGSTER_HOME"], env=env, stdout=out, stderr=subprocess.STDOUT)
