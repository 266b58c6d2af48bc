"""Dagster instance preparation: the ``rag_db`` and ``rag_answers`` concurrency pools.
``python -m rag_pipeline.defs.instance`` (run by ``rag-pipeline db start``) creates their limit rows once."""

import os
import sys

import dagster as dg

from rag_pipeline.storage.engine import first_line

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


def main() -> int:
    """Prepare the instance of DAGSTER_HOME; print ``ok: …`` (what it is) or one line saying what failed."""
    try:
        with dg.DagsterInstance.get() as instance:
            ensure_pool(instance)
            print(f"ok: the Dagster instance of DAGSTER_HOME={os.environ.get('DAGSTER_HOME')}: storage "
                  f"{type(instance.run_storage).__name__}, run launcher {type(instance.run_launcher).__name__}, "
                  f"pools {POOL} and {ANSWER_POOL} ready")
    except Exception as exc:  # noqa: BLE001 - any failure is one line, secrets masked
        print(f"rag-pipeline: the Dagster instance of DAGSTER_HOME={os.environ.get('DAGSTER_HOME')}: "
              f"{first_line(exc)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
