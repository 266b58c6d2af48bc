"""Evaluation runs through Dagster: queue the run rows, submit one ``evaluate_strategies`` run per click (a step
per strategy; in a background thread) to the instance's run queue, say whether a daemon will pick it up, and fail
the queued runs whose Dagster run ended before they started (docs/http-api.md, "Evaluations are asynchronous").

The run is created and queued in this process (:mod:`rag_pipeline.web.run_submission`); the daemon dequeues it
and the instance's run launcher starts it in a run worker, so nothing is evaluated in the API's process. With
:mod:`~rag_pipeline.web.run_submission`, the only modules of :mod:`rag_pipeline.web` that use dagster, imported
where the instance is opened. One :class:`Launcher` per app (``app.state.launcher``); the
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

from rag_pipeline.service.liveness.daemon import daemon_state
from rag_pipeline.service.liveness.runs import end_gone_runs, end_unsubmitted_runs
from rag_pipeline.service.queued_runs import (
    QueuedEvaluation,
    QueuedRun,
    fail_queued,
    queue_evaluations,
    queued_runs,
    strategy_step_key,
)
from rag_pipeline.settings import project_root
from rag_pipeline.storage import embedded_server
from rag_pipeline.storage.engine import dagster_database_url
from rag_pipeline.storage.urls import mask_secrets
from rag_pipeline.web.run_submission import (
    CODE_MODULE,
    CodeLocationError,
    failure_reasons,
    load_workspace,
    submit_strategies_run,
)

DATASET_PARTITIONS = "dataset"
DAEMON_TYPE = "QUEUED_RUN_COORDINATOR"
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
        self._daemon: subprocess.Popen | None = None  # the daemon start_daemon started

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
                stale = embedded_server.stale_env_problem(self.environment(), project_root())
                if stale:
                    raise LaunchError(stale)
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
        (:func:`~rag_pipeline.web.run_submission.load_workspace`; a failed load is not kept: the next click retries)."""
        inst = self.instance()
        with self._lock:
            if self._workspace is None:
                try:
                    self._workspace = load_workspace(inst, self.dagster_home())
                except CodeLocationError as exc:
                    raise LaunchError(str(exc)) from None
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
        """One ``evaluate_strategies`` run for ``runs``, into the instance's run queue."""
        submit_strategies_run(self.instance(), self.workspace(), runs)

    def queue_status(self, max_age_s: float = 5.0) -> QueueStatus:
        """Is a Dagster daemon picking up queued runs? (a daemon process of this DAGSTER_HOME, checked by
        :func:`~rag_pipeline.service.liveness.daemon.daemon_state`). Cached for ``max_age_s`` seconds. Never raises:
        a broken instance is reported in ``message``."""
        now = time.monotonic()
        cached = self._status
        if cached and now - cached[0] < max_age_s:
            return cached[1]
        try:
            beat = self.instance().get_daemon_heartbeats().get(DAEMON_TYPE)
            state = daemon_state(self.dagster_home(), None if beat is None else time.time() - beat.timestamp)
            mine = self._daemon
            if mine is not None and mine.poll() is not None and state.pid is None:  # the one we started ended
                state = type(state)(False, detail=f"the daemon this server started (pid {mine.pid}) exited with "
                                                  f"code {mine.returncode}")
            status = QueueStatus(True) if state.running else QueueStatus(False, (
                f"no Dagster daemon is running on DAGSTER_HOME={self.dagster_home()} ({state.detail}): queued "
                f"evaluation runs wait until one starts — {NO_DAEMON_FIX}"))
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
        evaluation started, or was never created and the process that queued it is gone
        (:func:`~rag_pipeline.service.liveness.runs.end_unsubmitted_runs`), and every ``running`` run whose Dagster
        run or process is gone
        (:func:`~rag_pipeline.service.liveness.runs.end_gone_runs`); returns how many. Skipped while another call
        runs; never raises."""
        if not self._reconciling.acquire(blocking=False):
            return 0
        try:
            return (self._reconcile(engine) + end_unsubmitted_runs(engine, self._existing_dagster_runs)
                    + end_gone_runs(engine, self._ended_dagster_runs))
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
                for run in by_id[record.run_id]:
                    why = (self._failure_reason(record.run_id, run.strategy_version)
                           if record.status.name == "FAILURE" else None)
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

    def _existing_dagster_runs(self, dagster_run_ids: Sequence[str]) -> set[str]:
        """The Dagster runs among ``dagster_run_ids`` that exist in the instance."""
        import dagster as dg  # noqa: PLC0415

        return {r.run_id for r in self.instance().get_runs(filters=dg.RunsFilter(run_ids=list(dagster_run_ids)))}

    def _ended_dagster_runs(self, dagster_run_ids: Sequence[str]) -> dict[str, str]:
        """The Dagster runs among ``dagster_run_ids`` that have ended, each with what happened to it."""
        import dagster as dg  # noqa: PLC0415

        ended = {}
        for record in self.instance().get_runs(filters=dg.RunsFilter(run_ids=list(dagster_run_ids))):
            verb = _FINISHED.get(record.status.name)
            if verb:
                why = self._failure_reason(record.run_id) if record.status.name == "FAILURE" else None
                ended[record.run_id] = (f"{verb} while the evaluation was running"
                                        + (f": {why}" if why else " (see the run in the Dagster UI)"))
        return ended

    def _failure_reason(self, dagster_run_id: str, strategy_version: str | None = None) -> str | None:
        """The one-line reason Dagster logged for a failed run: the failure of ``strategy_version``'s own step
        when it has one, else the run's last failure; None when the event log has none or cannot be read."""
        try:
            reasons = failure_reasons(self.instance(), dagster_run_id)
        except Exception as exc:  # noqa: BLE001 - the generic wording is kept
            log.warning("could not read the Dagster event log of run %s: %s", dagster_run_id, exc)
            return None
        own = reasons.get(strategy_step_key(strategy_version)) if strategy_version else None
        return own or reasons.get(None)

    def start_daemon(self, log_path: Path | None = None) -> subprocess.Popen:
        """Start ``dagster-daemon run -m rag_pipeline.definitions`` on this DAGSTER_HOME (what ``serve
        --with-daemon`` does when no daemon is alive); the caller stops it."""
        env = self._child_environment()
        out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
        self._daemon = subprocess.Popen([str(Path(sys.executable).with_name("dagster-daemon")), "run", "-m",
                                         CODE_MODULE], cwd=env["DAGSTER_HOME"], env=env, stdout=out,
                                        stderr=subprocess.STDOUT)
        self._status = None  # the queue status changes with it
        return self._daemon
