"""Running Dagster runs on Celery workers (deploy/celery/README.md): the run launcher, the worker's Celery app and
the name a run records of the process that executed it (docs/design.md §7.3)."""
