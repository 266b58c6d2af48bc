"""Evaluation run records: lifecycle ((queued →) running → succeeded | failed | abandoned), heartbeat, history
(the rules: docs/failure-behaviour.md; the statements: :mod:`rag_pipeline.evaluation.runs.queries`)."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import sqlalchemy as sa

from rag_pipeline.contracts.errors import ConflictError, DatabaseUnavailableError, NotFoundError
from rag_pipeline.evaluation.queries.knowledge_base import ping
from rag_pipeline.evaluation.runs import owner as run_owner
from rag_pipeline.evaluation.runs import queries
from rag_pipeline.settings import get_settings
from rag_pipeline.storage.ids import as_uuid
from rag_pipeline.storage.urls import mask_secrets

STATUSES = ("queued", "running", "succeeded", "failed", "abandoned")


class RunNotFoundError(NotFoundError, LookupError):
    """No evaluation run with that id."""


class RunNotQueuedError(RuntimeError):
    """A queued run that is no longer queued (already started, failed or finished) was asked to start."""


def stale_after_seconds() -> int:
    """Heartbeat age after which a ``running`` run counts as abandoned (``RAG_RUN_STALE_SECONDS``)."""
    return get_settings().run_stale_seconds


LOST_AFTER_BEATS = 6  # one slow beat on a busy host is not a lost process


def beat_interval() -> float:
    """Seconds between two heartbeats of a running run: a fifth of ``RAG_RUN_STALE_SECONDS``, at most 5."""
    return min(5.0, stale_after_seconds() / 5)


def lost_after_seconds() -> float:
    """Heartbeat age after which a ``running`` run's process counts as lost (:func:`sweep_gone`): six missed
    beats, at most ``RAG_RUN_STALE_SECONDS``."""
    return min(float(stale_after_seconds()), LOST_AFTER_BEATS * beat_interval())


def create_run(engine: sa.Engine | sa.Connection, *, dataset_id, knowledge_base_id, strategy, params_hash: str,
               partition_key: str | None = None, dagster_run_id: str | None = None, queued: bool = False) -> uuid.UUID:
    """Insert a ``running`` run row (``queued=True``: a ``queued`` one), owned by this process, and return its id:
    committed, or in the transaction of a given connection (the caller commits)."""
    run_id = uuid.uuid4()
    with nullcontext(engine) if isinstance(engine, sa.Connection) else engine.begin() as conn:
        queries.insert_run(conn, run_id, dataset_id=dataset_id, knowledge_base_id=knowledge_base_id, strategy=strategy,
                           params_hash=params_hash, partition_key=partition_key, dagster_run_id=dagster_run_id,
                           queued=queued, owner=run_owner.this_process())
    return run_id


def set_worker(engine: sa.Engine, run_id, worker: str) -> bool:
    """Record (committed at once) the process executing a queued or running run; False: no such row."""
    with engine.begin() as conn:
        return queries.set_worker(conn, as_uuid(run_id), worker)


def start_queued_run(engine: sa.Engine, run_id, *, strategy_version: str, params_hash: str,
                     dataset_id, dagster_run_id: str | None = None) -> None:
    """Move a ``queued`` run to ``running`` (its start time and heartbeat now). The run must still be queued
    and be the same strategy, parameters and dataset version, else :class:`RunNotQueuedError`."""
    with engine.begin() as conn:
        if queries.start_queued(conn, run_id, strategy_version=strategy_version, params_hash=params_hash,
                                dataset_id=dataset_id, dagster_run_id=dagster_run_id, owner=run_owner.this_process()):
            return
        found = queries.queue_state(conn, run_id)
    if found is None:
        raise RunNotQueuedError(f"evaluation run {run_id} does not exist; nothing to start")
    if found.status != "queued":
        raise RunNotQueuedError(f"evaluation run {run_id} is {found.status}, not queued; it is not run again")
    raise RunNotQueuedError(f"evaluation run {run_id} was queued for {found.strategy_version} on dataset version "
                            f"{found.dataset_id}, not {strategy_version} on {dataset_id} (or its parameters changed)")


@dataclass(frozen=True)
class Attempt:
    """The run row a retried Dagster step carries out (:func:`resume_queued_run`)."""

    run_id: uuid.UUID
    stored: bool = False
    """An earlier attempt stored the run (``succeeded``) and failed after its commit: nothing to evaluate again."""
    ended: uuid.UUID | None = None
    """The row of the failed attempt this call ended (``failed``, naming ``run_id`` as its retry)."""


def resume_queued_run(engine: sa.Engine, run_id, *, dagster_run_id: str, attempt_error: str | None = None) -> Attempt:
    """The row a retry of the Dagster step carrying out queued run ``run_id`` evaluates: the newest attempt if
    ``queued`` or ``succeeded``; else that one ends ``failed`` with why and a new ``queued`` row is the retry's."""
    with engine.begin() as conn:
        latest = queries.latest_attempt(conn, as_uuid(run_id), dagster_run_id)
        if latest is None:
            raise RunNotQueuedError(f"evaluation run {run_id} is not a run of Dagster run {dagster_run_id}; it is not "
                                    "run again")
        if latest.status in ("queued", "succeeded"):
            return Attempt(latest.id, stored=latest.status == "succeeded")
        retry = uuid.uuid4()
        why = (unrecorded_attempt_reason(attempt_error) if latest.status == "running"
               else latest.error or f"{latest.status} without a recorded reason")
        queries.insert_retry(conn, retry, latest.id)
        queries.end_attempt(conn, latest.id, mask_secrets(f"{why}; retried as evaluation run {retry}")[:10_000])
    return Attempt(retry, ended=latest.id)


def unrecorded_attempt_reason(attempt_error: str | None) -> str:
    """The error of a row its failed step attempt left ``running`` (the database was unreachable when it failed)."""
    return ("its step attempt ended while the database was unreachable, so it could not record why"
            + (f": {'; '.join(line.strip() for line in attempt_error.splitlines() if line.strip())}"
               if attempt_error else " (see the Dagster run's log)"))


def end_unrecorded_attempts(engine: sa.Engine, *, dagster_run_id: str, partition_key: str,
                            attempt_error: str | None = None) -> list[uuid.UUID]:
    """End ``failed`` the rows of partition ``partition_key`` in Dagster run ``dagster_run_id`` that a failed step
    attempt left ``running`` (before its retry creates its own); their ids."""
    with engine.begin() as conn:
        rows = queries.running_attempts(conn, dagster_run_id, partition_key)
        why = mask_secrets(unrecorded_attempt_reason(attempt_error))[:10_000]
        return [row.id for row in rows if queries.end_attempt(conn, row.id, why)]


def wait_until_reachable(engine: sa.Engine, timeout: float, on_wait=None) -> None:
    """Return once the database answers (tried every half second; its error after ``timeout`` seconds);
    ``on_wait(error)`` is called at the first failed try."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with engine.connect() as conn:
                ping(conn)
            return
        except (sa.exc.OperationalError, sa.exc.InterfaceError, DatabaseUnavailableError) as exc:
            if time.monotonic() >= deadline:
                raise
            if on_wait is not None:
                on_wait(exc)
                on_wait = None
            time.sleep(0.5)


log = logging.getLogger(__name__)


def heartbeat(engine: sa.Engine, run_id, cases_done: int | None = None) -> None:
    """Refresh a running run's heartbeat now (and its progress, ``cases_done``, after a batch)."""
    with engine.begin() as conn:
        queries.progress(conn, run_id, cases_done)


class Heartbeat:
    """Context manager: a daemon thread writes the run's ``heartbeat_at`` every fifth of ``RAG_RUN_STALE_SECONDS``
    (at most 5 s) on an autocommit connection of its own while the block runs; a failed beat is logged and retried."""

    def __init__(self, engine: sa.Engine, run_id):
        self.engine, self.run_id = engine, run_id
        self.interval = beat_interval()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rag-eval-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._conn: sa.Connection | None = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                if self._conn is None:
                    self._conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
                self._conn.execute(queries.HEARTBEAT_SQL, {"id": self.run_id})
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


def failure_reason(exc: BaseException) -> str:
    """The one-line reason a run row stores for ``exc``: its type and message, lines joined with "; " (Ctrl-C:
    ``interrupted (SIGINT) ...``, which a bare ``KeyboardInterrupt`` would not say)."""
    text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if type(exc) is KeyboardInterrupt:
        return ("interrupted (SIGINT): the process was stopped by Ctrl-C or kill -INT before the run finished; "
                "nothing of it was kept" + (f" ({text})" if text else ""))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def mark_failed(engine: sa.Engine, run_id, error: str) -> None:
    """Best effort: record the failure of a running or queued run (its results transaction rolled back)."""
    try:
        with engine.begin() as conn:
            queries.mark_failed(conn, run_id, mask_secrets(error)[:10_000])
    except sa.exc.SQLAlchemyError:  # the database itself is gone: the stale heartbeat will tell
        pass


def fail_running(engine: sa.Engine, run_id, error: str) -> bool:
    """Mark a ``running`` run failed with ``error``; False when it was no longer running (it ended meanwhile)."""
    with engine.begin() as conn:
        return queries.fail_running(conn, run_id, mask_secrets(error)[:10_000])


def sweep_gone(engine: sa.Engine, rows: Sequence[sa.Row] | None = None) -> int:
    """Mark failed every ``running`` run (of ``rows``, default: all) whose heartbeat is older than
    :func:`lost_after_seconds`, with that reason; returns how many. The age is read on the database's clock, so the
    process may have run on any machine (nothing asks the host it ran on)."""
    if rows is None:
        with engine.connect() as conn:
            rows = queries.running_runs(conn)
    lost, ended = lost_after_seconds(), 0
    for row in rows:
        if row.silent_s > lost:
            with engine.begin() as conn:
                ended += queries.fail_silent(conn, row.id, mask_secrets(lost_reason(row, lost)), lost)
    return ended


def lost_reason(row: sa.Row, lost: float) -> str:
    who = row.worker or (f"pid {row.owner_pid} on {row.owner_host}" if row.owner_pid is not None else "unknown")
    return (f"its process ({who}) sent no heartbeat for {row.silent_s:.0f} s (one every {beat_interval():g} s while "
            f"it runs; lost after {lost:g} s): it was killed (kill -9, out of memory), its machine was lost or it "
            "could not reach the database, and nothing of the run was kept; evaluate again")


def sweep_abandoned(engine: sa.Engine) -> int:
    """Mark ``running`` runs with a stale heartbeat as ``abandoned``; returns how many."""
    with engine.begin() as conn:
        return queries.sweep_abandoned(conn, stale=stale_after_seconds())


MIN_PREFIX = 4
"""Shortest run-id prefix :func:`resolve_run_id` accepts (hex digits)."""
_UUID_TEMPLATE = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
_HEX = frozenset("0123456789abcdef")
_SHOWN_MATCHES = 5


class AmbiguousRunIdError(ConflictError, RunNotFoundError):
    """A run-id prefix that matches more than one run."""


def _prefix_hex(text: str) -> str | None:
    """The hex digits of ``text`` when it starts a canonical UUID (with its hyphens or none), else None."""
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
    if (full := as_uuid(text)) is not None:
        return full
    digits = _prefix_hex(text)
    if digits is None or not digits:
        raise RunNotFoundError(f"{str(run_id)!r} is not a run id (a UUID, or a unique prefix of at least "
                               f"{MIN_PREFIX} hex digits; see `rag-pipeline runs`)")
    if len(digits) < MIN_PREFIX:
        raise RunNotFoundError(f"run id prefix {text!r} is too short: give at least {MIN_PREFIX} hex digits "
                               "(see `rag-pipeline runs`)")
    # uuid order is byte order, i.e. the order of the hex text: the prefix is the range [prefix000…, prefixfff…]
    rows = queries.runs_in_id_range(conn, digits.ljust(32, "0"), digits.ljust(32, "f"), _SHOWN_MATCHES + 1)
    if not rows:
        raise RunNotFoundError(f"no evaluation run id starts with {text!r} (see `rag-pipeline runs`)")
    if len(rows) > 1:
        shown = ", ".join(f"{r.id} ({r.strategy_version} on {r.dataset_name}, started "
                          f"{r.started_at.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC)" for r in rows[:_SHOWN_MATCHES])
        more = " and more" if len(rows) > _SHOWN_MATCHES else ""
        raise AmbiguousRunIdError(f"run id prefix {text!r} matches several runs: {shown}{more}; give more characters")
    return rows[0].id


def get_run(conn: sa.Connection, run_id) -> sa.Row:
    """One run (:data:`queries.RUN_COLUMNS`) by id or unique id prefix (:func:`resolve_run_id`)."""
    run_uuid = resolve_run_id(conn, run_id)
    row = queries.run_row(conn, run_uuid, stale=stale_after_seconds())
    if row is None:
        raise RunNotFoundError(f"no evaluation run {run_id} (see `rag-pipeline runs`)")
    return row


def list_runs(conn: sa.Connection, *, limit: int = 100, offset: int = 0, **filters) -> Sequence[sa.Row]:
    """Run history, latest submitted first, filtered as :func:`queries.list_runs` says (``status``: the effective
    one, a stale ``running`` run is ``abandoned``)."""
    return queries.list_runs(conn, limit=limit, offset=offset, stale=stale_after_seconds(), **filters)
