"""Dagster instance preparation: the ``rag_db`` and ``rag_answers`` concurrency pools.
``python -m rag_pipeline.defs.instance`` (run by ``rag-pipeline db start``) creates their limit rows once."""

import dagster as dg

POOL = "rag_db"
ANSWER_POOL = "rag_answers"


def ensure_pool(instance: dg.DagsterInstance) -> None:
    """Create the ``rag_db`` and ``rag_answers`` pools' limit rows once, before runs share them: on fresh storage
    two runs claiming a pool at the same moment both insert it and one fails (Dagster 1.13, UniqueViolation)."""
    storage = instance.event_log_storage
    known = storage.get_concurrency_keys()
    for pool in (POOL, ANSWER_POOL):
        if pool not in known:  # initialising an existing row fails in Dagster 1.13
            storage.initialize_concurrency_limit_to_default(pool)


if __name__ == "__main__":
    with dg.DagsterInstance.get() as _instance:
        ensure_pool(_instance)
