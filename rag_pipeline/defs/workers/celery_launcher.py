"""Dagster's ``CeleryRunLauncher`` with a health check that notices a dead worker (deploy/celery/README.md): the
worker that took the task must answer a ping, else the run is reported failed."""

from __future__ import annotations

from dagster._core.launcher import CheckRunHealthResult, WorkerStatus
from dagster_celery.launcher import CeleryRunLauncher
from dagster_celery.tags import DAGSTER_CELERY_TASK_ID_TAG

PING_TIMEOUT_S = 5.0
MISSED_PINGS = 2  # one slow reply on a busy host is not a dead worker


class RagCeleryRunLauncher(CeleryRunLauncher):
    """``CeleryRunLauncher`` (same configuration) whose run health check pings the worker running the run."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._missed: dict[str, int] = {}

    def worker_of(self, task_id: str) -> str | None:
        """The node name of the worker that started task ``task_id`` (None before it started)."""
        info = self.celery.AsyncResult(task_id).info
        return info.get("hostname") if isinstance(info, dict) else None

    def answers(self, worker: str) -> bool:
        """Whether the Celery worker ``worker`` answers a ping."""
        replies = self.celery.control.ping(destination=[worker], timeout=PING_TIMEOUT_S) or []
        return any(worker in reply for reply in replies)

    def check_run_worker_health(self, run) -> CheckRunHealthResult:
        result = super().check_run_worker_health(run)
        if result.status != WorkerStatus.RUNNING:
            self._missed.pop(run.run_id, None)
            return result
        worker = self.worker_of(run.tags[DAGSTER_CELERY_TASK_ID_TAG])
        if worker is None or self.answers(worker):
            self._missed.pop(run.run_id, None)
            return result
        missed = self._missed[run.run_id] = self._missed.get(run.run_id, 0) + 1
        if missed < MISSED_PINGS:
            return result
        self._missed.pop(run.run_id, None)
        return CheckRunHealthResult(WorkerStatus.FAILED, f"Celery worker {worker} does not answer (stopped or "
                                                         f"lost) while it runs this run")
