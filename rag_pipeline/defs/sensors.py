"""``new_dataset_sensor``: a new or changed ``datasets/*.json`` → dataset partition + one run per strategy.

Watches :func:`rag_pipeline.settings.datasets_dir` (``RAG_DATASETS_DIR``, default ``datasets/``).
The cursor maps each file stem to ``{mtime_ns, size, sha256}``: an untouched file costs one ``stat``, a
touched file is hashed, and only a new hash requests runs. Run keys ``<file>:<sha256>:<strategy>`` make
the requests idempotent (the same content never runs twice for a strategy, even after a cursor reset).
The file is not parsed here: an invalid file produces failed runs whose error lists every problem.

Default status **RUNNING**: with ``dagster dev`` (which starts the daemon) dropping a file into
``datasets/`` evaluates it with every strategy without a click. Stop it in the UI (Automation tab) or
with ``dagster sensor stop new_dataset_sensor`` if you only want manual runs.
"""

import hashlib
import json

import dagster as dg

from rag_pipeline.defs.jobs import evaluate_retrieval_job
from rag_pipeline.defs.partitions import dataset_partitions, partition_key, strategy_partitions
from rag_pipeline.evaluation.dataset import MAX_FILE_BYTES, valid_dataset_key
from rag_pipeline.settings import datasets_dir
from rag_pipeline.storage.files import FileReadError, check_regular, read_bounded
from rag_pipeline.storage.names import DATASET, name_rule, printable


def file_sha256(path) -> str:
    """SHA-256 of a dataset file, read through the bounded reader (a FIFO or device never blocks the sensor)."""
    return hashlib.sha256(read_bounded(path, MAX_FILE_BYTES, what="the dataset file")).hexdigest()


@dg.sensor(
    name="new_dataset_sensor",
    job=evaluate_retrieval_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="New or changed datasets/*.json → add the dataset partition and evaluate it with every strategy.",
)
def new_dataset_sensor(context: dg.SensorEvaluationContext):
    folder = datasets_dir()
    previous: dict = json.loads(context.cursor) if context.cursor else {}
    cursor: dict = {}
    new_keys: list[str] = []
    requests: list[dg.RunRequest] = []
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    for path in files:
        key = path.stem
        if not valid_dataset_key(key):
            context.log.warning(f"ignoring {printable(path.name)}: {name_rule(DATASET)}")
            continue
        try:
            stat = check_regular(path)  # a FIFO, device or dangling link must never block the sensor
            seen = previous.get(key)
            if seen and (seen["mtime_ns"], seen["size"]) == (stat.st_mtime_ns, stat.st_size):
                cursor[key] = seen
                continue
            digest = file_sha256(path)
        except FileReadError as exc:
            context.log.warning(f"ignoring {printable(path.name)}: {exc}")
            continue
        cursor[key] = {"mtime_ns": stat.st_mtime_ns, "size": stat.st_size, "sha256": digest}
        if seen and seen["sha256"] == digest:
            continue  # touched, same content
        if key not in new_keys and not context.instance.has_dynamic_partition(dataset_partitions.name, key):
            new_keys.append(key)
        context.log.info(f"{'changed' if seen else 'new'} dataset file {path.name} (sha256 {digest[:12]})")
        requests += [
            dg.RunRequest(run_key=f"{path.name}:{digest}:{version}", partition_key=partition_key(key, version),
                          tags={"rag/dataset_file": path.name})
            for version in strategy_partitions.get_partition_keys()
        ]
    for gone in sorted(set(previous) - set(cursor) - {k for k in previous if not valid_dataset_key(k)}):
        context.log.info(f"dataset file {gone}.json disappeared (its partition and runs are kept)")
    if not requests:
        context.update_cursor(json.dumps(cursor, sort_keys=True))
        return dg.SkipReason(f"no new or changed dataset file in {folder} ({len(files)} watched)")
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[dataset_partitions.build_add_request(new_keys)] if new_keys else [],
        cursor=json.dumps(cursor, sort_keys=True),
    )
