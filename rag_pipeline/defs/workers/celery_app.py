"""The Celery app of a worker: ``celery -A rag_pipeline.defs.workers.celery_app worker -P threads -n NAME@%h``
(deploy/celery/README.md), built from the run launcher of the Dagster instance of ``DAGSTER_HOME``."""

from __future__ import annotations

import dagster as dg
from dagster_celery.launcher import CeleryRunLauncher
from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_execute_job_task, create_resume_job_task


def worker_app():
    """The Celery app of the instance's ``CeleryRunLauncher`` (a clear error when the instance has another)."""
    with dg.DagsterInstance.get() as instance:
        launcher = instance.run_launcher
        if not isinstance(launcher, CeleryRunLauncher):
            raise SystemExit(f"the Dagster instance of DAGSTER_HOME has run launcher {type(launcher).__name__}, "
                             "not a CeleryRunLauncher: point DAGSTER_HOME at deploy/celery (its dagster.yaml)")
        app = make_app(launcher.app_args())
    # one run at a time per slot, none reserved ahead (as dagster-celery's own worker command): a message a worker
    # holds unstarted is lost with it on kill -9, and its run would wait start_timeout_seconds in STARTING
    app.conf.worker_prefetch_multiplier = 1
    return app


app = worker_app()
execute_job = create_execute_job_task(app)
resume_job = create_resume_job_task(app)
# A worker takes a message only when one of its threads is free (Redis broker, Celery >= 5.6): with prefetch 1 alone
# a busy worker still reserves the next message (it acknowledges each on start), so it would hold the next run of a
# click spread as a run per strategy while another worker sits idle.
app.conf.worker_disable_prefetch = True
