"""Collect one answer line per dataset case from an endpoint (at most ``concurrency`` cases in flight, each line
scrubbed and appended at once) or an in-process answerer (docs/answers-collection.md)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from rag_pipeline.answers.collection.answerers import Answerer
from rag_pipeline.answers.collection.answers_writer import AnswersWriter
from rag_pipeline.answers.collection.endpoint_client import CaseOutcome, EndpointClient
from rag_pipeline.answers.collection.reply_mapping import error_record, scrubbed_record
from rag_pipeline.contracts.answers import AnswerRecord, CollectionProgress, CollectionResult
from rag_pipeline.evaluation.datasets.load import EvaluationCase

Progress = Callable[[CollectionProgress], None]
CANCELLED = "the collection was cancelled (the client that asked went away); the lines written are kept"


class _Tally:
    """The run's counts and latencies, reported after every case."""

    def __init__(self, total: int, skipped: int, progress: Progress | None):
        self.total, self.skipped, self.progress = total, skipped, progress
        self.answered = self.errors = self.requests = 0
        self.latencies: list[float] = []
        self.first_error: str | None = None

    def add(self, record: AnswerRecord, requests: int = 0) -> None:
        self.requests += requests
        if record.status == "ok":
            self.answered += 1
        else:
            self.errors += 1
            self.first_error = self.first_error or f"{record.case_id}: {record.error}"
        if record.latency_ms is not None and record.status == "ok":
            self.latencies.append(record.latency_ms)
        if self.progress is not None:
            p50, p95 = self.percentiles()
            self.progress(CollectionProgress(done=self.skipped + self.answered + self.errors, total=self.total,
                                             errors=self.errors, skipped_existing=self.skipped,
                                             latency_ms_p50=p50, latency_ms_p95=p95))

    def percentiles(self) -> tuple[float | None, float | None]:
        if not self.latencies:
            return None, None
        p50, p95 = np.percentile(np.asarray(self.latencies), [50, 95])
        return round(float(p50), 3), round(float(p95), 3)

    def result(self, output: str, stop_reason: str | None, answerer: str | None) -> CollectionResult:
        asked = self.answered + self.errors
        reason = stop_reason
        if reason is None and asked and not self.answered:
            reason = f"no case was answered; first error: {self.first_error}"
        p50, p95 = self.percentiles()
        return CollectionResult(
            output=output, total=self.total, answered=self.answered, errors=self.errors,
            skipped_existing=self.skipped, not_asked=self.total - self.skipped - asked, requests=self.requests,
            latency_ms_p50=p50, latency_ms_p95=p95, status="failed" if reason else "succeeded", reason=reason,
            answerer=answerer)


def collect_from_endpoint(client: EndpointClient, cases: Sequence[EvaluationCase], writer: AnswersWriter, *,
                          total: int, skipped: int, progress: Progress | None = None,
                          cancel: threading.Event | None = None) -> CollectionResult:
    """Ask ``client`` every case of ``cases`` (the ones not yet answered), appending each line to ``writer``."""
    tally = _Tally(total, skipped, progress)
    stop_reason = asyncio.run(_ask_all(client, cases, writer, tally, cancel))
    return tally.result(str(writer.path), stop_reason, None)


async def _watch(cancel: threading.Event, stop: list[str], running: set[asyncio.Task]) -> None:
    while not cancel.is_set():
        await asyncio.sleep(0.1)
    stop.insert(0, CANCELLED)
    for task in list(running):
        task.cancel()


async def _ask_all(client: EndpointClient, cases: Sequence[EvaluationCase], writer: AnswersWriter,
                   tally: _Tally, cancel: threading.Event | None = None) -> str | None:
    gate = asyncio.Semaphore(client.config.concurrency)
    running: set[asyncio.Task] = set()
    stop: list[str] = []
    failure: list[BaseException] = []

    async def one(case: EvaluationCase) -> None:
        try:
            try:
                outcome: CaseOutcome = await client.ask(case)
            except Exception as exc:  # noqa: BLE001 - one case's reply never ends the collection
                # (e.g. a body its Content-Encoding cannot decode); at least one request was made
                outcome = CaseOutcome(error_record(case.case_id, "the reply could not be handled: "
                                                                 f"{type(exc).__name__}"), 1)
            record = scrubbed_record(outcome.record, client.headers.scrub)
            write = asyncio.ensure_future(asyncio.to_thread(writer.append, record))
            try:
                record = await asyncio.shield(write)
            except asyncio.CancelledError:  # a line being written is finished first (the file stays whole)
                await write
                raise
            tally.add(record, outcome.requests)
            if outcome.unreachable and not stop:
                stop.append(f"the endpoint is unreachable: {record.error}")
        except Exception as exc:  # noqa: BLE001 - e.g. a disk error: no new case starts; re-raised below
            failure.append(exc)

    watcher = asyncio.create_task(_watch(cancel, stop, running)) if cancel is not None else None
    async with client:
        try:
            for case in cases:
                await gate.acquire()
                if stop or failure:
                    gate.release()
                    break
                task = asyncio.create_task(one(case))
                running.add(task)
                task.add_done_callback(running.discard)
                task.add_done_callback(lambda _task: gate.release())  # a task cancelled before it ran too
            if running:
                await asyncio.gather(*running, return_exceptions=True)
        finally:
            if watcher is not None:
                watcher.cancel()
    if failure:
        raise failure[0]
    return stop[0] if stop else None


def collect_from_answerer(answerer: Answerer, cases: Sequence[EvaluationCase], writer: AnswersWriter, *,
                          total: int, skipped: int, progress: Progress | None = None,
                          cancel: threading.Event | None = None) -> CollectionResult:
    """Append the answerer's line for every case of ``cases``, its identity set on each unnamed line."""
    tally = _Tally(total, skipped, progress)
    pending = {c.case_id for c in cases}
    start = time.perf_counter()
    for record in answerer.answer_cases(cases):
        if cancel is not None and cancel.is_set():
            return tally.result(str(writer.path), CANCELLED, answerer.identity)
        if record.case_id not in pending:
            raise RuntimeError(f"answerer {answerer.identity!r} answered case {record.case_id!r}, which it was not "
                               "asked (or twice)")
        pending.discard(record.case_id)
        now = time.perf_counter()
        update: dict = {"answerer": record.answerer or answerer.identity}
        if record.latency_ms is None:
            update["latency_ms"] = round((now - start) * 1000, 3)
        record = writer.append(record.model_copy(update=update))
        tally.add(record)
        start = now
    return tally.result(str(writer.path), None, answerer.identity)
