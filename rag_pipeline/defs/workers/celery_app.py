"""The Celery app of a worker: ``celery -A rag_pipeline.defs.workers.celery_app worker -P threads -n NAME@%h``
(deploy/celery/README.md), built from the run launcher of the Dagster instance of ``DAGSTER_HOME``."""

from __future__ import annotations

import sys

import dagster as dg
from celery import signals
from dagster_celery.launcher import CeleryRunLauncher
from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_execute_job_task, create_resume_job_task

from rag_pipeline.defs.workers import readiness
from rag_pipeline.storage.engine import first_line


def worker_app():
    """The Celery app of the instance's ``CeleryRunLauncher`` (a clear error when the instance has another)."""
    try:
        instance = dg.DagsterInstance.get()
    except Exception as exc:  # noqa: BLE001 - a missing DAGSTER_HOME, file or variable: one line, no traceback
        raise SystemExit(f"rag-pipeline worker: cannot load the Dagster instance of DAGSTER_HOME: {first_line(exc)} "
                         "(`python -m rag_pipeline.defs.workers config DIR` writes its dagster.yaml)") from None
    with instance:
        launcher = instance.run_launcher
        if not isinstance(launcher, CeleryRunLauncher):
            raise SystemExit(f"the Dagster instance of DAGSTER_HOME has run launcher {type(launcher).__name__}, "
                             "not a CeleryRunLauncher: `python -m rag_pipeline.defs.workers config DIR` writes "
                             "the deployment's")
        app = make_app(launcher.app_args())
    # one run at a time per slot, none reserved ahead (as dagster-celery's own worker command): a message a worker
    # holds unstarted is lost with it on kill -9, and its run would wait start_timeout_seconds in STARTING
    app.conf.worker_prefetch_multiplier = 1
    # Dagster writes its events (with their own levels) to stderr: not re-logged as Celery WARNING lines
    app.conf.worker_redirect_stdouts = False
    return app


@signals.celeryd_init.connect
def refuse_unless_ready(sender=None, **_) -> None:
    """At ``celery worker`` start (not for ``celery inspect``): stop, naming what is missing (:mod:`readiness`)."""
    missing, ok = readiness.problems()
    for line in missing:
        print(f"rag-pipeline worker {sender}: missing {line}", file=sys.stderr, flush=True)
    if missing:
        raise SystemExit(f"rag-pipeline worker {sender}: not started ({len(missing)} missing)")
    print(f"rag-pipeline worker {sender}: ready: {'; '.join(ok)}", file=sys.stderr, flush=True)


app = worker_app()
execute_job = create_execute_job_task(app)
resume_job = create_resume_job_task(app)
# A worker takes a message only when one of its threads is free (Redis broker, Celery >= 5.6): with prefetch 1 alone
# a busy worker still reserves the next message (it acknowledges each on start), so it would hold the next run of a
# click spread as a run per strategy while another worker sits idle.
app.conf.worker_disable_prefetch = True
