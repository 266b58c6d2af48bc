"""Dagster instance preparation: the ``rag_db`` concurrency pool that every database-touching asset uses.

``python -m rag_pipeline.defs.instance`` (run by ``rag-pipeline db start``) creates the pool's limit row in the
instance of ``DAGSTER_HOME`` once, before concurrent runs race to create it.
"""

import dagster as dg

POOL = "rag_db"


def ensure_pool(instance: dg.DagsterInstance) -> None:
    """Create the ``rag_db`` pool's limit row once, before runs share it: on fresh storage two runs claiming
    the pool at the same moment both insert it and one fails (Dagster 1.13, UniqueViolation)."""
    storage = instance.event_log_storage
    if POOL not in storage.get_concurrency_keys():  # initialising an existing row fails in Dagster 1.13
        storage.initialize_concurrency_limit_to_default(POOL)


if __name__ == "__main__":
    with dg.DagsterInstance.get() as _instance:
        ensure_pool(_instance)
