"""Evaluation run records: lifecycle ((queued →) running → succeeded | failed | abandoned), heartbeat, history.

A run row is created and committed on its own (status ``running``) before any result is computed, so
a run in progress is visible, together with its candidate partition (:func:`create_candidate_partition`);
its heartbeat is refreshed every few seconds by a background thread on a connection of its own
(:class:`Heartbeat`), however long one batch takes, and ``cases_done`` after every batch (:func:`heartbeat`).
A run the HTTP API submits to Dagster is created ``queued`` (:func:`create_run` with ``queued=True``) and
moved to ``running`` by the Dagster step that evaluates it (:func:`start_queued_run`). The results themselves
are written by :mod:`rag_pipeline.evaluation.persistence` in one separate transaction that also flips the
status to ``succeeded``. A ``running`` run whose heartbeat is older than :func:`stale_after_seconds`
(process killed, machine lost) is reported as ``abandoned`` and swept to that status by the next run.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import uuid

import sqlalchemy as sa

from rag_pipeline.contracts.errors import ConflictError, NotFoundError
from rag_pipeline.settings import get_settings
from rag_pipeline.storage.urls import mask_secrets

STATUSES = ("queued", "running", "succeeded", "failed", "abandoned")


class RunNotFoundError(NotFoundError, LookupError):
    """No evaluation run with that id."""


class RunNotQueuedError(RuntimeError):
    """A queued run that is no longer queued (already started, failed or finished) was asked to start."""


def stale_after_seconds() -> int:
    """Heartbeat age after which a ``running`` run counts as abandoned (``RAG_RUN_STALE_SECONDS``)."""
    return get_settings().run_stale_seconds


EFFECTIVE_STATUS = (
    "CASE WHEN r.status = 'running' AND r.heartbeat_at < now() - make_interval(secs => :stale) "
    "THEN 'abandoned' ELSE r.status END"
)


def create_run(engine: sa.Engine | sa.Connection, *, dataset_id, knowledge_base_id, strategy, params_hash: str,
               partition_key: str | None = None, dagster_run_id: str | None = None,
               queued: bool = False) -> uuid.UUID:
    """Insert and commit a ``running`` run row (``queued=True``: a ``queued`` one); returns its id. Given a
    connection, the row is inserted in its transaction (the caller commits)."""
    run_id = uuid.uuid4()
    statement = sa.text(
        "INSERT INTO retrieval_evaluation_runs (id, dataset_id, knowledge_base_id, strategy_version, "
        "params_hash, strategy_params, embedding_model, status, is_current, partition_key, dagster_run_id, "
        "case_count, candidate_count, queued_at) VALUES (:id, :ds, :kb, :v, :h, CAST(:p AS jsonb), :m, :status, "
        "false, :pk, :dr, 0, 0, CASE WHEN :queued THEN now() END)")
    params = {"id": run_id, "ds": dataset_id, "kb": knowledge_base_id, "v": strategy.version, "h": params_hash,
              "p": _json(strategy.params()), "m": strategy.embedding_model if strategy.vector_candidate_k else None,
              "pk": partition_key, "dr": dagster_run_id, "status": "queued" if queued else "running",
              "queued": queued}
    if isinstance(engine, sa.Connection):
        engine.execute(statement, params)
        return run_id
    with engine.begin() as conn:
        conn.execute(statement, params)
    return run_id


def set_knowledge_base_version(engine: sa.Engine, run_id, version: str) -> None:
    """Record (committed at once, so a running or failed run shows it too) the knowledge-base version the run
    reads: :func:`rag_pipeline.knowledge_base.versions.content_version` in the run's snapshot."""
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE retrieval_evaluation_runs SET knowledge_base_version = :v WHERE id = :id"),
                     {"id": run_id, "v": version})


def start_queued_run(engine: sa.Engine, run_id, *, strategy_version: str, params_hash: str,
                     dataset_id, dagster_run_id: str | None = None) -> None:
    """Move a ``queued`` run to ``running`` (its start time and heartbeat now). The run must still be queued
    and be the same strategy, parameters and dataset version, else :class:`RunNotQueuedError`."""
    with engine.begin() as conn:
        row = conn.execute(sa.text(
            "UPDATE retrieval_evaluation_runs SET status = 'running', started_at = now(), heartbeat_at = now(), "
            "dagster_run_id = coalesce(:dr, dagster_run_id) WHERE id = :id AND status = 'queued' "
            "AND strategy_version = :v AND params_hash = :h AND dataset_id = :ds RETURNING id"),
            {"id": run_id, "dr": dagster_run_id, "v": strategy_version, "h": params_hash, "ds": dataset_id}).first()
        if row is None:
            found = conn.execute(sa.text(
                "SELECT status, strategy_version, params_hash, dataset_id FROM retrieval_evaluation_runs "
                "WHERE id = :id"), {"id": run_id}).first()
    if row is not None:
        return
    if found is None:
        raise RunNotQueuedError(f"evaluation run {run_id} does not exist; nothing to start")
    if found.status != "queued":
        raise RunNotQueuedError(f"evaluation run {run_id} is {found.status}, not queued; it is not run again")
    raise RunNotQueuedError(f"evaluation run {run_id} was queued for {found.strategy_version} on dataset version "
                            f"{found.dataset_id}, not {strategy_version} on {dataset_id} (or its parameters changed)")


def create_candidate_partition(engine: sa.Engine, run_id) -> None:
    """Create and attach the run's partition of ``retrieval_evaluation_candidate_rows`` (its own transaction:
    ATTACH PARTITION takes a SHARE UPDATE EXCLUSIVE lock on the parent, which no running write waits for)."""
    with engine.begin() as conn:
        conn.execute(sa.text("SELECT rag_candidate_partition(:id)"), {"id": run_id})


_HEARTBEAT_SQL = sa.text("UPDATE retrieval_evaluation_runs SET heartbeat_at = clock_timestamp() "
                         "WHERE id = :id AND status = 'running'")
_PROGRESS_SQL = sa.text("UPDATE retrieval_evaluation_runs SET heartbeat_at = clock_timestamp(), "
                         "cases_done = coalesce(:done, cases_done) WHERE id = :id AND status = 'running'")
log = logging.getLogger(__name__)


def heartbeat(engine: sa.Engine, run_id, cases_done: int | None = None) -> None:
    """Refresh a running run's heartbeat now (and its progress, ``cases_done``, after a batch)."""
    with engine.begin() as conn:
        conn.execute(_PROGRESS_SQL, {"id": run_id, "done": cases_done})


def heartbeat_interval() -> float:
    """Seconds between two heartbeats: a fifth of ``RAG_RUN_STALE_SECONDS``, at most 5 s."""
    return min(5.0, stale_after_seconds() / 5)


class Heartbeat:
    """Context manager: a daemon thread writes the run's ``heartbeat_at`` every :func:`heartbeat_interval`
    seconds on a connection of its own (autocommit), for as long as the block runs, so a batch slower than
    ``RAG_RUN_STALE_SECONDS`` never gets its run marked abandoned. A failed beat is logged and retried."""

    def __init__(self, engine: sa.Engine, run_id, interval: float | None = None):
        self.engine, self.run_id = engine, run_id
        self.interval = heartbeat_interval() if interval is None else interval
        self.beats = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rag-eval-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                if self._conn is None:
                    self._conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
                self._conn.execute(_HEARTBEAT_SQL, {"id": self.run_id})
                self.beats += 1
            except sa.exc.SQLAlchemyError as exc:  # the next beat retries on a new connection
                log.warning(f"heartbeat of run {self.run_id} failed: {exc}")
                if self._conn is not None:
                    self._conn.invalidate()
                    self._conn.close()
                self._conn = None

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if self._conn is not None:
            self._conn.close()


def mark_failed(engine: sa.Engine, run_id, error: str) -> None:
    """Best effort: record the failure of a running or queued run (the results transaction has already been
    rolled back)."""
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(
                "UPDATE retrieval_evaluation_runs SET status = 'failed', error = :e, finished_at = clock_timestamp(), "
                "is_current = false WHERE id = :id AND status IN ('running', 'queued')"
            ), {"id": run_id, "e": mask_secrets(error)[:10_000]})
    except sa.exc.SQLAlchemyError:  # the database itself is gone: the stale heartbeat will tell
        pass


def sweep_abandoned(engine: sa.Engine) -> int:
    """Mark ``running`` runs with a stale heartbeat as ``abandoned``; returns how many."""
    with engine.begin() as conn:
        return conn.execute(sa.text(
            "UPDATE retrieval_evaluation_runs r SET status = 'abandoned', finished_at = now(), "
            "error = coalesce(r.error, 'no heartbeat since ' || r.heartbeat_at || ' (process stopped?)') "
            f"WHERE r.status = 'running' AND ({EFFECTIVE_STATUS}) = 'abandoned'"
        ), {"stale": stale_after_seconds()}).rowcount


RUN_COLUMNS = f"""
    r.id, {EFFECTIVE_STATUS} AS status, r.is_current, r.strategy_version, r.params_hash, r.strategy_params,
    r.embedding_model, r.knowledge_base_version, r.partition_key, r.dagster_run_id, r.case_count, r.candidate_count,
    r.precision_at_k, r.recall_at_k, r.reciprocal_rank, r.ndcg_at_k, r.hit_at_k, r.average_precision_at_k,
    r.r_precision, r.timings, r.summary, r.error, r.started_at, r.heartbeat_at, r.finished_at, r.cases_done,
    r.queued_at,
    d.id AS dataset_id, d.name AS dataset_name, d.content_hash AS dataset_version, d.source_path,
    d.case_count AS dataset_case_count, kb.id AS knowledge_base_id, kb.name AS knowledge_base_name
"""
RUN_FROM = """
    FROM retrieval_evaluation_runs r
    JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
    JOIN knowledge_bases kb ON kb.id = r.knowledge_base_id
"""


MIN_PREFIX = 4
"""Shortest run-id prefix :func:`resolve_run_id` accepts (hex digits)."""
_UUID_TEMPLATE = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
_HEX = frozenset("0123456789abcdef")
_SHOWN_MATCHES = 5


class AmbiguousRunIdError(ConflictError, RunNotFoundError):
    """A run-id prefix that matches more than one run."""


def _prefix_hex(text: str) -> str | None:
    """The hex digits of ``text`` when it is the start of a canonical UUID (hyphens where a UUID has them, or
    none at all), else None."""
    if len(text) <= 32 and set(text) <= _HEX:
        return text
    if len(text) <= len(_UUID_TEMPLATE) and all(
            (c == "-") if t == "-" else (c in _HEX) for c, t in zip(text, _UUID_TEMPLATE, strict=False)):
        return text.replace("-", "")
    return None


def resolve_run_id(conn: sa.Connection, run_id) -> uuid.UUID:
    """The run id that ``run_id`` names: a full UUID (returned as is; :func:`get_run` checks it exists), or a
    unique prefix of at least :data:`MIN_PREFIX` hex digits, case-insensitive (``fda25a97``, as the tables
    print). No match → :class:`RunNotFoundError`; several → :class:`AmbiguousRunIdError` listing the first few."""
    if isinstance(run_id, uuid.UUID):
        return run_id
    text = str(run_id).strip().lower()
    try:
        return uuid.UUID(text)
    except ValueError:
        pass
    digits = _prefix_hex(text)
    if digits is None or not digits:
        raise RunNotFoundError(f"{str(run_id)!r} is not a run id (a UUID, or a unique prefix of at least "
                               f"{MIN_PREFIX} hex digits; see `rag-pipeline runs`)")
    if len(digits) < MIN_PREFIX:
        raise RunNotFoundError(f"run id prefix {text!r} is too short: give at least {MIN_PREFIX} hex digits "
                               "(see `rag-pipeline runs`)")
    # uuid order is byte order, i.e. the order of the hex text: the prefix is the range [prefix000…, prefixfff…]
    rows = conn.execute(sa.text(
        "SELECT r.id, r.strategy_version, d.name AS dataset_name, r.started_at "
        "FROM retrieval_evaluation_runs r JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id "
        "WHERE r.id BETWEEN CAST(:lo AS uuid) AND CAST(:hi AS uuid) ORDER BY r.started_at DESC, r.id LIMIT :n"
    ), {"lo": digits.ljust(32, "0"), "hi": digits.ljust(32, "f"), "n": _SHOWN_MATCHES + 1}).all()
    if not rows:
        raise RunNotFoundError(f"no evaluation run id starts with {text!r} (see `rag-pipeline runs`)")
    if len(rows) > 1:
        shown = ", ".join(f"{r.id} ({r.strategy_version} on {r.dataset_name}, started "
                          f"{r.started_at.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC)" for r in rows[:_SHOWN_MATCHES])
        more = " and more" if len(rows) > _SHOWN_MATCHES else ""
        raise AmbiguousRunIdError(f"run id prefix {text!r} matches several runs: {shown}{more}; "
                                  "give more characters")
    return rows[0].id


def get_run(conn: sa.Connection, run_id) -> sa.Row:
    """One run (:data:`RUN_COLUMNS`) by id or unique id prefix (:func:`resolve_run_id`)."""
    run_uuid = resolve_run_id(conn, run_id)
    row = conn.execute(sa.text(f"SELECT {RUN_COLUMNS} {RUN_FROM} WHERE r.id = :id"),
                       {"id": run_uuid, "stale": stale_after_seconds()}).first()
    if row is None:
        raise RunNotFoundError(f"no evaluation run {run_id} (see `rag-pipeline runs`)")
    return row


def _run_filter(*, knowledge_base_id=None, dataset: str | None = None, strategy: str | None = None,
                current_only: bool = False, status: str | None = None, run_ids=None) -> tuple[str, dict]:
    where, params = ["true"], {"stale": stale_after_seconds()}
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


def list_runs(conn: sa.Connection, *, limit: int = 100, offset: int = 0, **filters) -> list[sa.Row]:
    """Run history, newest first (seed §6.2 ``GET /knowledge-bases/{id}/retrieval/runs``). Filters:
    ``knowledge_base_id``, ``dataset``, ``strategy``, ``current_only``, ``status`` (the effective status: a stale
    ``running`` run is ``abandoned``), ``run_ids``. Newest = latest submitted (``queued_at``, else started)."""
    where, params = _run_filter(**filters)
    return conn.execute(sa.text(
        f"SELECT {RUN_COLUMNS} {RUN_FROM} WHERE {where} "
        "ORDER BY coalesce(r.queued_at, r.started_at) DESC, r.started_at DESC, r.id LIMIT :limit OFFSET :offset"
    ), {**params, "limit": int(limit), "offset": int(offset)}).all()


def count_runs(conn: sa.Connection, **filters) -> int:
    """How many runs :func:`list_runs` would list without a limit."""
    where, params = _run_filter(**filters)
    return conn.execute(sa.text(f"SELECT count(*) {RUN_FROM} WHERE {where}"), params).scalar_one()


def _json(value) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=False)
