"""The name of the process executing a run (docs/design.md §6.1): the Celery worker's node name, else this host."""

from __future__ import annotations

import socket

WORKER_TAG = "rag/worker"


def worker_name() -> str:
    """``NAME@host`` of the Celery worker running the current task, else the host name."""
    try:
        from celery import current_task  # noqa: PLC0415 - celery is the optional `celery` extra
    except ImportError:
        return socket.gethostname()
    request = getattr(current_task, "request", None) if current_task else None
    return getattr(request, "hostname", None) or socket.gethostname()
