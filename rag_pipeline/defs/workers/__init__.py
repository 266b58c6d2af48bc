"""Running Dagster runs on Celery workers (deploy/celery/README.md)."""
