"""The name of the process executing a run: the Celery worker's node name, else this host.

Inside a Celery task (a run launched by :class:`~rag_pipeline.defs.workers.celery_launcher.RagCeleryRunLauncher`)
it is the worker's node name as given by ``-n NAME@%h``; under the default run launcher (a local subprocess) it is
the host name. Each evaluation run records it in its row, its Dagster run tags and its asset metadata
(docs/design.md §6.1).
"""

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
