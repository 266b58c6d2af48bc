"""Statements on evaluation runs (``retrieval_evaluation_runs``): lifecycle, history, retention. ``stale``: the
heartbeat age (seconds) after which a ``running`` run counts as ``abandoned`` (:data:`EFFECTIVE_STATUS`)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from rag_pipeline.contracts.runs import DatasetRef, KnowledgeBaseRef, RunSummary
from rag_pipeline.evaluation.metrics import METRIC_NAMES

EFFECTIVE_STATUS = (
    "CASE WHEN r.status = 'running' AND r.heartbeat_at < now() - make_interval(secs => :stale) "
    "THEN 'abandoned' ELSE r.status END")
RUN_COLUMNS = f"""
    r.id, {EFFECTIVE_STATUS} AS status, r.is_current, r.strategy_version, r.params_hash, r.strategy_params,
    r.embedding_model, r.knowledge_base_version, r.partition_key, r.dagster_run_id, r.worker, r.case_count,
    r.candidate_count, {', '.join('r.' + m for m in METRIC_NAMES)}, r.timings, r.summary, r.error, r.started_at,
    r.heartbeat_at, r.finished_at, r.cases_done, r.queued_at,
    d.id AS dataset_id, d.name AS dataset_name, d.content_hash AS dataset_version, d.source_path,
    d.case_count AS dataset_case_count, kb.id AS knowledge_base_id, kb.name AS knowledge_base_name
"""
RUN_FROM = """
    FROM retrieval_evaluation_runs r
    JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
    JOIN knowledge_bases kb ON kb.id = r.knowledge_base_id
"""

_INSERT_RUN_SQL = sa.text(
    "INSERT INTO retrieval_evaluation_runs (id, dataset_id, knowledge_base_id, strategy_version, "
    "params_hash, strategy_params, embedding_model, status, is_current, partition_key, dagster_run_id, "
    "case_count, candidate_count, queued_at, owner_host, owner_pid, owner_started_at) VALUES (:id, :ds, :kb, :v, "
    ":h, CAST(:p AS jsonb), :m, :status, false, :pk, :dr, 0, 0, CASE WHEN :queued THEN now() END, :oh, :op, :os)")
HEARTBEAT_SQL = sa.text("UPDATE retrieval_evaluation_runs SET heartbeat_at = clock_timestamp() "
                        "WHERE id = :id AND status = 'running'")


def insert_run(conn: sa.Connection, run_id: uuid.UUID, *, dataset_id, knowledge_base_id, strategy, params_hash: str,
               partition_key: str | None, dagster_run_id: str | None, queued: bool, owner=None) -> None:
    """A new run row, ``running`` (``queued``: ``queued``, with its queue time), not current; ``owner``: the
    :class:`~rag_pipeline.evaluation.runs.owner.Owner` evaluating it."""
    conn.execute(_INSERT_RUN_SQL, {**_owner(owner),
        "id": run_id, "ds": dataset_id, "kb": knowledge_base_id, "v": strategy.version, "h": params_hash,
        "p": json.dumps(strategy.params(), sort_keys=True, allow_nan=False),
        "m": strategy.embedding_model if strategy.vector_candidate_k else None, "pk": partition_key,
        "dr": dagster_run_id, "status": "queued" if queued else "running", "queued": queued})


def set_worker(conn: sa.Connection, run_id, worker: str) -> bool:
    """Name the process executing a queued or running run (a finished run keeps what it has); False: no such row."""
    return conn.execute(sa.text(
        "UPDATE retrieval_evaluation_runs SET worker = :w WHERE id = :id "
        "AND (status IN ('queued', 'running') OR worker IS NULL) RETURNING id"),
        {"id": run_id, "w": worker}).first() is not None


def set_knowledge_base_version(conn: sa.Connection, run_id, version: str) -> None:
    conn.execute(sa.text("UPDATE retrieval_evaluation_runs SET knowledge_base_version = :v WHERE id = :id"),
                 {"id": run_id, "v": version})


def start_queued(conn: sa.Connection, run_id, *, strategy_version: str, params_hash: str, dataset_id,
                 dagster_run_id: str | None, owner=None) -> bool:
    """Move the run to ``running`` (evaluated by ``owner``) if it is still queued for this strategy, parameters and
    dataset version."""
    return conn.execute(sa.text(
        "UPDATE retrieval_evaluation_runs SET status = 'running', started_at = now(), heartbeat_at = now(), "
        "dagster_run_id = coalesce(:dr, dagster_run_id), owner_host = :oh, owner_pid = :op, owner_started_at = :os "
        "WHERE id = :id AND status = 'queued' AND strategy_version = :v AND params_hash = :h AND dataset_id = :ds "
        "RETURNING id"),
        {"id": run_id, "dr": dagster_run_id, "v": strategy_version, "h": params_hash, "ds": dataset_id,
         **_owner(owner)}).first() is not None


def _owner(owner) -> dict:
    return {"oh": owner.host if owner else None, "op": owner.pid if owner else None,
            "os": owner.started_at if owner else None}


def running_runs(conn: sa.Connection, limit: int = 1000) -> Sequence[sa.Row]:
    """``id, dagster_run_id, worker, owner_host, owner_pid, silent_s`` (the heartbeat's age in seconds, on the
    database's clock) of the ``running`` rows, oldest first."""
    return conn.execute(sa.text(
        "SELECT id, dagster_run_id, worker, owner_host, owner_pid, "
        "extract(epoch FROM clock_timestamp() - heartbeat_at)::float AS silent_s FROM retrieval_evaluation_runs "
        "WHERE status = 'running' ORDER BY started_at LIMIT :n"), {"n": limit}).all()


def fail_silent(conn: sa.Connection, run_id, error: str, lost: float) -> int:
    """Mark a ``running`` run failed with ``error`` if its heartbeat is still older than ``lost`` seconds."""
    return conn.execute(sa.text(
        "UPDATE retrieval_evaluation_runs SET status = 'failed', error = :e, finished_at = clock_timestamp(), "
        "is_current = false WHERE id = :id AND status = 'running' "
        "AND heartbeat_at < clock_timestamp() - make_interval(secs => :lost)"),
        {"id": run_id, "e": error, "lost": lost}).rowcount


def queued_rows(conn: sa.Connection, queue: str, limit: int = 500) -> list[sa.Row]:
    """``id, strategy_version, partition_key, dagster_run_id, dataset_id, dataset`` of the ``queued`` rows of
    ``queue``, oldest first."""
    return list(conn.execute(sa.text(
        "SELECT r.id, r.strategy_version, r.partition_key, r.dagster_run_id, r.dataset_id, d.name AS dataset "
        "FROM retrieval_evaluation_runs r JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id "
        "WHERE r.status = 'queued' AND r.queue = :q ORDER BY r.queued_at, r.id LIMIT :n"),
        {"q": queue, "n": limit}).all())


def set_queue(conn: sa.Connection, run_id, queue: str) -> None:
    conn.execute(sa.text("UPDATE retrieval_evaluation_runs SET queue = :q WHERE id = :id"), {"q": queue, "id": run_id})


def claim_queued(conn: sa.Connection, queue_id: str, dagster_run_id: str, run_ids: list[str] | None = None) -> int:
    """The ``queued`` rows queued together as ``queue_id`` (only ``run_ids`` of them, when given) now carry the id
    of the Dagster run that runs them."""
    return conn.execute(sa.text(
        "UPDATE retrieval_evaluation_runs SET dagster_run_id = :dr WHERE dagster_run_id = :q AND status = 'queued' "
        "AND (CAST(:ids AS text[]) IS NULL OR id::text = ANY(CAST(:ids AS text[])))"),
        {"dr": dagster_run_id, "q": queue_id, "ids": run_ids}).rowcount


def record_tick(conn: sa.Connection, sensor: str) -> None:
    conn.execute(sa.text(
        "INSERT INTO dagster_sensor_ticks (sensor, ticked_at) VALUES (:s, now()) "
        "ON CONFLICT (sensor) DO UPDATE SET ticked_at = excluded.ticked_at"), {"s": sensor})


def tick_age(conn: sa.Connection, sensor: str) -> float | None:
    """Seconds since the sensor's last tick (None: it never ticked)."""
    return conn.execute(sa.text(
        "SELECT extract(epoch FROM clock_timestamp() - ticked_at) FROM dagster_sensor_ticks WHERE sensor = :s"),
        {"s": sensor}).scalar()


def fail_running(conn: sa.Connection, run_id, error: str) -> bool:
    """Mark a ``running`` run failed (a queued or finished one is left alone); whether it was."""
    return conn.execute(sa.text(
        "UPDATE retrieval_evaluation_runs SET status = 'failed', error = :e, finished_at = clock_timestamp(), "
        "is_current = false WHERE id = :id AND status = 'running'"), {"id": run_id, "e": error}).rowcount == 1


def queue_state(conn: sa.Connection, run_id) -> sa.Row | None:
    """``status, strategy_version, params_hash, dataset_id`` of a run (None: no such run)."""
    return conn.execute(sa.text(
        "SELECT status, strategy_version, params_hash, dataset_id FROM retrieval_evaluation_runs "
        "WHERE id = :id"), {"id": run_id}).first()


def latest_attempt(conn: sa.Connection, run_id, dagster_run_id: str) -> sa.Row | None:
    """``id, status, error`` of the newest row (locked) of the Dagster step carrying out run ``run_id`` in Dagster run
    ``dagster_run_id`` (same knowledge base, dataset version and strategy); None: ``run_id`` is not of that run."""
    return conn.execute(sa.text(
        "SELECT a.id, a.status, a.error FROM retrieval_evaluation_runs r JOIN retrieval_evaluation_runs a "
        "ON a.dagster_run_id = r.dagster_run_id AND a.knowledge_base_id = r.knowledge_base_id "
        "AND a.dataset_id = r.dataset_id AND a.strategy_version = r.strategy_version "
        "WHERE r.id = :id AND r.dagster_run_id = :dr "
        "ORDER BY coalesce(a.queued_at, a.started_at) DESC, a.started_at DESC, a.id LIMIT 1 FOR UPDATE OF a"),
        {"id": run_id, "dr": dagster_run_id}).first()


def running_attempts(conn: sa.Connection, dagster_run_id: str, partition_key: str) -> Sequence[sa.Row]:
    """``id`` of the ``running`` rows of Dagster run ``dagster_run_id`` for partition ``partition_key``, locked
    until the transaction ends."""
    return conn.execute(sa.text(
        "SELECT id FROM retrieval_evaluation_runs WHERE dagster_run_id = :dr AND partition_key = :pk "
        "AND status = 'running' ORDER BY started_at FOR UPDATE"), {"dr": dagster_run_id, "pk": partition_key}).all()


def end_attempt(conn: sa.Connection, run_id, error: str) -> bool:
    """A ``running``, ``failed`` or ``abandoned`` run ends ``failed`` with ``error`` (its end time kept when it has
    one); whether it did."""
    return conn.execute(sa.text(
        "UPDATE retrieval_evaluation_runs SET status = 'failed', error = :e, "
        "finished_at = coalesce(finished_at, clock_timestamp()), is_current = false "
        "WHERE id = :id AND status IN ('running', 'failed', 'abandoned')"), {"id": run_id, "e": error}).rowcount == 1


def insert_retry(conn: sa.Connection, new_id: uuid.UUID, of_run) -> None:
    """A new ``queued`` run ``new_id`` of the same Dagster run, partition, knowledge base, dataset version and
    strategy (parameters, embedding model) as run ``of_run``: what a retry of its Dagster step evaluates."""
    conn.execute(sa.text(
        "INSERT INTO retrieval_evaluation_runs (id, dataset_id, knowledge_base_id, strategy_version, params_hash, "
        "strategy_params, embedding_model, status, is_current, partition_key, dagster_run_id, case_count, "
        "candidate_count, queued_at, queue) SELECT :new, dataset_id, knowledge_base_id, strategy_version, "
        "params_hash, strategy_params, embedding_model, 'queued', false, partition_key, dagster_run_id, 0, 0, now(), "
        "queue FROM retrieval_evaluation_runs WHERE id = :of"), {"new": new_id, "of": of_run})


def create_candidate_partition(conn: sa.Connection, run_id) -> None:
    conn.execute(sa.text("SELECT rag_candidate_partition(:id)"), {"id": run_id})


def progress(conn: sa.Connection, run_id, cases_done: int | None) -> None:
    """The heartbeat now, and ``cases_done`` when given."""
    conn.execute(sa.text("UPDATE retrieval_evaluation_runs SET heartbeat_at = clock_timestamp(), "
                         "cases_done = coalesce(:done, cases_done) WHERE id = :id AND status = 'running'"),
                 {"id": run_id, "done": cases_done})


def mark_failed(conn: sa.Connection, run_id, error: str) -> None:
    conn.execute(sa.text(
        "UPDATE retrieval_evaluation_runs SET status = 'failed', error = :e, finished_at = clock_timestamp(), "
        "is_current = false WHERE id = :id AND status IN ('running', 'queued')"), {"id": run_id, "e": error})


def sweep_abandoned(conn: sa.Connection, *, stale: int) -> int:
    return conn.execute(sa.text(
        "UPDATE retrieval_evaluation_runs r SET status = 'abandoned', finished_at = now(), "
        "error = coalesce(r.error, 'no heartbeat since ' || r.heartbeat_at || ' (process stopped?)') "
        f"WHERE r.status = 'running' AND ({EFFECTIVE_STATUS}) = 'abandoned'"), {"stale": stale}).rowcount


def runs_in_id_range(conn: sa.Connection, lo: str, hi: str, limit: int) -> Sequence[sa.Row]:
    """Runs whose id lies in [``lo``, ``hi``] (32 hex digits each), newest first: id, strategy, dataset, start."""
    return conn.execute(sa.text(
        "SELECT r.id, r.strategy_version, d.name AS dataset_name, r.started_at "
        "FROM retrieval_evaluation_runs r JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id "
        "WHERE r.id BETWEEN CAST(:lo AS uuid) AND CAST(:hi AS uuid) ORDER BY r.started_at DESC, r.id LIMIT :n"
    ), {"lo": lo, "hi": hi, "n": limit}).all()


def summary_of(row: sa.Row) -> RunSummary:
    """The :class:`RunSummary` of a :data:`RUN_COLUMNS` row (:func:`run_row`, :func:`list_runs`)."""
    return RunSummary(
        run_id=str(row.id), status=row.status, is_current=row.is_current, strategy_version=row.strategy_version,
        params_hash=row.params_hash, strategy_params=row.strategy_params, embedding_model=row.embedding_model,
        dataset=DatasetRef(id=str(row.dataset_id), name=row.dataset_name, version=row.dataset_version,
                           source_path=row.source_path, case_count=row.dataset_case_count),
        knowledge_base=KnowledgeBaseRef(id=str(row.knowledge_base_id), name=row.knowledge_base_name,
                                        version=row.knowledge_base_version),
        **{m: getattr(row, m) for m in METRIC_NAMES},
        case_count=row.case_count, candidate_count=row.candidate_count, counts=row.summary, timings=row.timings,
        question_embeddings=(row.summary or {}).get("question_embeddings"),
        stages=(row.summary or {}).get("stages"), partition_key=row.partition_key,
        dagster_run_id=row.dagster_run_id, worker=row.worker, error=row.error,
        started_at=row.started_at.isoformat(), finished_at=row.finished_at.isoformat() if row.finished_at else None,
        queued_at=row.queued_at.isoformat() if row.queued_at else None, cases_done=row.cases_done)


def run_row(conn: sa.Connection, run_id: uuid.UUID, *, stale: int) -> sa.Row | None:
    """One run's :data:`RUN_COLUMNS`."""
    return conn.execute(sa.text(f"SELECT {RUN_COLUMNS} {RUN_FROM} WHERE r.id = :id"),
                        {"id": run_id, "stale": stale}).first()


def _run_filter(*, stale: int, knowledge_base_id=None, dataset: str | None = None, strategy: str | None = None,
                current_only: bool = False, status: str | None = None, run_ids=None) -> tuple[str, dict]:
    where, params = ["true"], dict[str, Any](stale=stale)
    if status:
        where.append(f"({EFFECTIVE_STATUS}) = :status")
        params["status"] = status
    if run_ids is not None:
        where.append("r.id = ANY(:ids)")
        params["ids"] = [uuid.UUID(str(i)) for i in run_ids]
    if knowledge_base_id is not None:
        where.append("r.knowledge_base_id = :kb")
        params["kb"] = knowledge_base_id
    if dataset:
        where.append("d.name = :ds")
        params["ds"] = dataset
    if strategy:
        where.append("r.strategy_version = :sv")
        params["sv"] = strategy
    if current_only:
        where.append("r.is_current")
    return " AND ".join(where), params


def list_runs(conn: sa.Connection, *, limit: int, offset: int, **filters) -> Sequence[sa.Row]:
    """:data:`RUN_COLUMNS` of the runs :func:`_run_filter` selects, latest submitted first."""
    where, params = _run_filter(**filters)
    return conn.execute(sa.text(
        f"SELECT {RUN_COLUMNS} {RUN_FROM} WHERE {where} "
        "ORDER BY coalesce(r.queued_at, r.started_at) DESC, r.started_at DESC, r.id LIMIT :limit OFFSET :offset"
    ), {**params, "limit": int(limit), "offset": int(offset)}).all()


def count_runs(conn: sa.Connection, **filters) -> int:
    where, params = _run_filter(**filters)
    return conn.execute(sa.text(f"SELECT count(*) {RUN_FROM} WHERE {where}"), params).scalar_one()


def run_strategy(conn: sa.Connection, run_id) -> sa.Row | None:
    """``strategy_version, strategy_params, knowledge_base_id`` and the headline averages of a run."""
    return conn.execute(sa.text(
        "SELECT r.strategy_version, r.strategy_params, r.knowledge_base_id, r.ndcg_at_k, r.recall_at_k, "
        "r.precision_at_k, r.reciprocal_rank FROM retrieval_evaluation_runs r WHERE r.id = CAST(:id AS uuid)"),
        {"id": str(run_id)}).first()


def knowledge_base_state(conn: sa.Connection, run_id) -> str | None:
    """The run's knowledge-base id and the ``xmin`` of that row (None: no such run)."""
    return conn.execute(sa.text(
        "SELECT k.id::text || ':' || k.xmin::text FROM retrieval_evaluation_runs r "
        "JOIN knowledge_bases k ON k.id = r.knowledge_base_id WHERE r.id = CAST(:id AS uuid)"),
        {"id": str(run_id)}).scalar()


def lock_current_slot(conn: sa.Connection, key: str) -> None:
    """Serialise, until the transaction ends, everyone who elects the current run of ``key``."""
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"), {"key": key})


def mark_succeeded(conn: sa.Connection, run_id, *, averages, case_count: int, candidate_count: int,
                   timings: str, summary: str) -> int:
    """Write a ``running`` run's results (``timings``, ``summary``: JSON text) as ``succeeded``; rows updated."""
    sets = ", ".join(f"{m} = :{m}" for m in METRIC_NAMES)
    return conn.execute(sa.text(
        f"UPDATE retrieval_evaluation_runs SET status = 'succeeded', case_count = :cases, cases_done = :cases, "
        f"candidate_count = :cands, {sets}, timings = CAST(:timings AS jsonb), summary = CAST(:summary AS jsonb), "
        "error = NULL, finished_at = clock_timestamp(), heartbeat_at = now() WHERE id = :id AND status = 'running'"
    ), {"id": run_id, "cases": case_count, "cands": candidate_count,
        **{m: float(averages[m]) for m in METRIC_NAMES}, "timings": timings,
        "summary": summary}).rowcount


def elect_current(conn: sa.Connection, *, dataset_name: str, knowledge_base_name: str, strategy_version: str) -> None:
    """Make the succeeded run on the dataset's latest version with the latest start the current one."""
    conn.execute(sa.text("""
WITH slot AS (
    SELECT r.id, r.is_current, row_number() OVER (ORDER BY d.last_seen_at DESC, r.started_at DESC, r.id) AS place
    FROM retrieval_evaluation_runs r JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
    WHERE d.name = :ds AND d.knowledge_base_name = :kb AND r.strategy_version = :sv AND r.status = 'succeeded'
)
UPDATE retrieval_evaluation_runs r SET is_current = (slot.place = 1)
FROM slot WHERE r.id = slot.id AND r.is_current <> (slot.place = 1)
"""), {"ds": dataset_name, "kb": knowledge_base_name, "sv": strategy_version})


def prunable_runs(conn: sa.Connection, *, keep: int, days: float | None, dataset: str | None,
                  stale: int) -> Sequence[sa.Row]:
    """Runs beyond the ``keep`` newest of their dataset × knowledge base × strategy, neither current nor in
    progress nor queued (started ``days`` ago or earlier; ``dataset``: of that name), oldest first, with
    ``compared`` (a stored comparison refers to it) and ``bytes`` (its partition's and case results' size)."""
    return conn.execute(sa.text(f"""
WITH ranked AS (
    SELECT r.id, r.is_current, r.started_at, r.strategy_version, r.candidate_count, d.name AS dataset,
           kb.name AS knowledge_base, {EFFECTIVE_STATUS} AS status,
           row_number() OVER (PARTITION BY d.name, r.knowledge_base_id, r.strategy_version
                              ORDER BY r.started_at DESC, r.id) AS place,
           EXISTS (SELECT 1 FROM retrieval_comparison_runs c WHERE c.evaluation_run_id = r.id) AS compared
    FROM retrieval_evaluation_runs r
    JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
    JOIN knowledge_bases kb ON kb.id = r.knowledge_base_id
    WHERE (CAST(:dataset AS text) IS NULL OR d.name = :dataset)
)
SELECT id, is_current, started_at, strategy_version, candidate_count, dataset, knowledge_base, status, compared,
       coalesce(pg_total_relation_size(to_regclass(quote_ident(rag_candidate_partition_name(id)))), 0)
       + coalesce((SELECT sum(pg_column_size(cr.*)) FROM retrieval_evaluation_case_results cr
                   WHERE cr.evaluation_run_id = ranked.id), 0) AS bytes
FROM ranked
WHERE place > :keep AND NOT is_current AND status NOT IN ('running', 'queued')
  AND (CAST(:days AS float8) IS NULL OR started_at < now() - make_interval(secs => CAST(:days AS float8) * 86400))
ORDER BY started_at, id
"""), {"keep": keep, "days": days, "dataset": dataset, "stale": stale}).all()


def set_lock_timeout(conn: sa.Connection, seconds: int) -> None:
    """Wait at most ``seconds`` for a lock, until the transaction ends."""
    conn.execute(sa.text("SELECT set_config('lock_timeout', :t, true)"), {"t": f"{int(seconds)}s"})


def delete_runs(conn: sa.Connection, run_ids: list[str]) -> None:
    """Delete the runs that are not current (the trigger drops each run's partition; case results and comparison
    records cascade)."""
    conn.execute(sa.text("DELETE FROM retrieval_evaluation_runs WHERE id = ANY(CAST(:ids AS uuid[])) "
                         "AND NOT is_current"), {"ids": run_ids})


def replace_comparison_runs(conn: sa.Connection, comparison: str, run_ids: Sequence[str]) -> None:
    """Make ``run_ids`` (those that exist) the runs comparison ``comparison`` refers to."""
    conn.execute(sa.text("DELETE FROM retrieval_comparison_runs WHERE comparison = :c"), {"c": comparison})
    conn.execute(sa.text(
        "INSERT INTO retrieval_comparison_runs (comparison, evaluation_run_id) "
        "SELECT :c, r.id FROM retrieval_evaluation_runs r WHERE r.id = ANY(CAST(:ids AS uuid[])) "
        "ON CONFLICT DO NOTHING"), {"c": comparison, "ids": [str(i) for i in run_ids]})


def succeeded_runs(conn: sa.Connection, dataset: str, kb_id, limit: int) -> Sequence[sa.RowMapping]:
    """Every succeeded run of a dataset name on a knowledge base, all versions, oldest first, with its averages."""
    return conn.execute(sa.text(f"""
SELECT r.id::text AS run_id, r.strategy_version, d.content_hash, r.is_current, r.started_at, r.finished_at,
       r.case_count, {', '.join('r.' + m for m in METRIC_NAMES)}
FROM retrieval_evaluation_runs r JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
WHERE d.name = :ds AND r.knowledge_base_id = :kb AND r.status = 'succeeded' AND r.finished_at IS NOT NULL
ORDER BY r.finished_at, r.id
LIMIT :limit
"""), {"ds": dataset, "kb": kb_id, "limit": int(limit)}).mappings().all()


def finished_outside_dagster(conn: sa.Connection, after: str, after_id: str, limit: int) -> Sequence[sa.RowMapping]:
    """Succeeded runs without a Dagster run id finished after (``after``, ``after_id``), oldest first."""
    return conn.execute(sa.text(f"""
SELECT r.id::text AS run_id, d.name AS dataset, d.content_hash, kb.name AS knowledge_base, r.strategy_version,
       r.knowledge_base_version,
       r.params_hash, r.case_count, r.candidate_count, r.finished_at, {', '.join('r.' + m for m in METRIC_NAMES)}
FROM retrieval_evaluation_runs r
JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
JOIN knowledge_bases kb ON kb.id = r.knowledge_base_id
WHERE r.status = 'succeeded' AND r.dagster_run_id IS NULL
  AND (r.finished_at, r.id::text) > (CAST(:after AS timestamptz), CAST(:after_id AS text))
ORDER BY r.finished_at, r.id::text
LIMIT :limit
"""), {"after": after, "after_id": after_id, "limit": limit}).mappings().all()


def current_runs(conn: sa.Connection) -> Sequence[sa.Row]:
    """Every current succeeded run: dataset, knowledge base, strategy, the knowledge-base version it measured."""
    return conn.execute(sa.text("""
SELECT d.name AS dataset, kb.name AS knowledge_base, r.strategy_version, r.knowledge_base_version, r.id::text AS run_id
FROM retrieval_evaluation_runs r
JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
JOIN knowledge_bases kb ON kb.id = r.knowledge_base_id
WHERE r.is_current AND r.status = 'succeeded'
ORDER BY d.name, r.strategy_version, kb.name
""")).all()


def current_params(conn: sa.Connection, dataset: str, knowledge_base: str, content_hash: str) -> dict[str, str]:
    """Strategy → parameters hash of the current succeeded runs on one dataset version."""
    return dict(conn.execute(sa.text("""
SELECT r.strategy_version, r.params_hash FROM retrieval_evaluation_runs r
JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
WHERE d.name = :ds AND d.knowledge_base_name = :kb AND d.content_hash = :hash AND r.is_current
  AND r.status = 'succeeded'
"""), {"ds": dataset, "kb": knowledge_base, "hash": content_hash}).all())


def latest_per_strategy(conn: sa.Connection, dataset_id: str, knowledge_base: str) -> Sequence[sa.Row]:
    """Per strategy, the latest-started succeeded run on one dataset version: ``run_id``, strategy, finish."""
    return conn.execute(sa.text("""
SELECT DISTINCT ON (r.strategy_version) r.id::text AS run_id, r.strategy_version, r.finished_at
FROM retrieval_evaluation_runs r
JOIN knowledge_bases kb ON kb.id = r.knowledge_base_id
WHERE r.dataset_id = CAST(:dataset_id AS uuid) AND r.status = 'succeeded' AND kb.name = :kb
ORDER BY r.strategy_version, r.started_at DESC, r.id
"""), {"dataset_id": dataset_id, "kb": knowledge_base}).all()


def current_on_other_versions(conn: sa.Connection, dataset: str, knowledge_base: str,
                              dataset_id: str) -> Sequence[sa.Row]:
    """``strategy_version``, ``content_hash`` of the current succeeded runs on other versions of the dataset."""
    return conn.execute(sa.text("""
SELECT r.strategy_version, max(d.content_hash) AS content_hash
FROM retrieval_evaluation_runs r
JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
WHERE d.name = :ds AND d.knowledge_base_name = :kb AND r.status = 'succeeded' AND r.is_current
  AND d.id <> CAST(:dataset_id AS uuid)
GROUP BY r.strategy_version ORDER BY r.strategy_version
"""), {"ds": dataset, "kb": knowledge_base, "dataset_id": dataset_id}).all()


def latest_of_strategy(conn: sa.Connection, strategy_version: str, dataset_id: str | None) -> sa.Row | None:
    """The latest-started succeeded run of a strategy on a dataset version, with its parameters and names."""
    return conn.execute(sa.text("""
SELECT r.id::text AS run_id, r.strategy_version, r.params_hash, r.strategy_params, r.case_count,
       r.finished_at, d.name AS dataset_name, d.content_hash, kb.name AS kb_name
FROM retrieval_evaluation_runs r
JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
JOIN knowledge_bases kb ON kb.id = r.knowledge_base_id
WHERE r.strategy_version = :sv AND r.status = 'succeeded' AND r.dataset_id = CAST(:dataset_id AS uuid)
ORDER BY r.started_at DESC, r.id
LIMIT 1
"""), {"sv": strategy_version, "dataset_id": dataset_id}).first()


def strategies_with_runs(conn: sa.Connection, dataset_id: str) -> Sequence[str]:
    """The strategies with a succeeded run on a dataset version, by name."""
    return conn.execute(sa.text(
        "SELECT DISTINCT r.strategy_version FROM retrieval_evaluation_runs r "
        "WHERE r.dataset_id = CAST(:dataset_id AS uuid) AND r.status = 'succeeded' ORDER BY 1"),
        {"dataset_id": dataset_id}).scalars().all()


def insert_rescored(conn: sa.Connection, new_id: uuid.UUID, of_run, dataset_id, owner=None) -> None:
    """A new ``running`` run ``new_id`` of the knowledge base, strategy (parameters, embedding model) and knowledge
    base version of run ``of_run``, on dataset version ``dataset_id``: a re-scoring of its stored pools."""
    conn.execute(sa.text(
        "INSERT INTO retrieval_evaluation_runs (id, dataset_id, knowledge_base_id, strategy_version, params_hash, "
        "strategy_params, embedding_model, knowledge_base_version, status, is_current, case_count, candidate_count, "
        "owner_host, owner_pid, owner_started_at) SELECT :new, :ds, knowledge_base_id, strategy_version, "
        "params_hash, strategy_params, embedding_model, knowledge_base_version, 'running', false, 0, 0, :oh, :op, "
        ":os FROM retrieval_evaluation_runs WHERE id = :of"), {"new": new_id, "of": of_run, "ds": dataset_id,
                                                              **_owner(owner)})
