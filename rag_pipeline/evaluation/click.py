"""One click: several strategies of one dataset, evaluated at once in forked processes, each run stored as alone.

A click's strategies read the same things: the knowledge base's in-memory leg indexes and the stored question
vectors. This process loads the indexes once (:func:`~rag_pipeline.evaluation.evaluate.load_leg_indexes`), then
forks up to ``RAG_CLICK_PROCESSES`` processes (default: every core) that read the same pages; each evaluates its
strategies with :func:`~rag_pipeline.evaluation.evaluate.evaluate_dataset`, unchanged, on connections of its own.
Strategies sharing an HNSW vector leg (the same model, search mode, ``ef_search`` and candidate k) go to one
process one after the other, so the second takes the first's hits (:mod:`~rag_pipeline.retrieval.leg_cache`).
The stored runs are those of the strategies run one after the other, bit for bit (``bench/click_bench.py`` prints
their digest).

What runs in this process instead, one after the other: a strategy of an ``http`` retriever (its own threads ask
the endpoint), one with a rerank stage (its model never runs after a fork), every strategy on an attached or
external knowledge base, and, per embedding model whose question vectors are not all stored yet, the model's first
strategy, which embeds and stores them before the others fork (its run counts them). A strategy that fails does
not stop the others; the caller gets each strategy's outcome or error, in the order given."""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import sqlalchemy as sa

from rag_pipeline.contracts.errors import (
    BadInputError,
    CheckFailed,
    ConflictError,
    DatabaseUnavailableError,
    NotFoundError,
    NotFoundOrInvalidError,
    RagError,
)
from rag_pipeline.evaluation import gc_pause
from rag_pipeline.evaluation.datasets.load import Dataset
from rag_pipeline.evaluation.evaluate import (
    BATCH_SIZE,
    EvaluationOutcome,
    Progress,
    evaluate_dataset,
    exact_in_memory,
    load_leg_indexes,
)
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseRef
from rag_pipeline.knowledge_base.question_embeddings import unembedded
from rag_pipeline.retrieval.strategies import Strategy
from rag_pipeline.settings import get_settings
from rag_pipeline.storage.engine import forget_parent_connections

log = logging.getLogger(__name__)
Result = EvaluationOutcome | BaseException
"""A strategy's stored run, or why it has none."""


@dataclass(frozen=True)
class ClickRun:
    """One strategy of a click: the ``queued`` run row it carries out (else a new row), its Dagster partition."""

    strategy: Strategy
    queued_run_id: str | None = None
    partition_key: str | None = None


@dataclass(frozen=True)
class _Click:
    """What a forked process evaluates with (inherited at the fork, never pickled)."""

    engine: sa.Engine
    dataset: Dataset
    kb: KnowledgeBaseRef
    runs: tuple[ClickRun, ...]
    options: dict
    events: multiprocessing.SimpleQueue


_click: _Click | None = None
_forking = threading.Lock()  # one click's processes at a time per process (they inherit the module's _click)


def click_processes(lanes: int) -> int:
    """Processes for a click of ``lanes`` groups: ``RAG_CLICK_PROCESSES`` (default every core), at most ``lanes``."""
    return max(1, min(get_settings().click_processes or os.cpu_count() or 1, lanes))


def forkable(kb: KnowledgeBaseRef, strategy: Strategy) -> bool:
    """Whether ``strategy`` may run in a forked process: a built-in strategy without a rerank stage on a project
    knowledge base (nothing in it loads a model or starts an HTTP client after the fork)."""
    return kb.kind == "project" and strategy.http is None and strategy.rerank is None


def lanes(runs: Sequence[ClickRun], indexes: Sequence[int]) -> list[list[int]]:
    """``indexes`` of ``runs`` grouped by the HNSW vector leg they share (one group per strategy without one),
    biggest group first, else in the order given."""
    groups: dict[object, list[int]] = {}
    for i in indexes:
        s = runs[i].strategy
        shared = s.vector_candidate_k and not exact_in_memory(s)
        key = (s.embedding_model, s.vector_search, s.ef_search, s.vector_candidate_k) if shared else i
        groups.setdefault(key, []).append(i)
    return sorted(groups.values(), key=len, reverse=True)


def evaluate_click(engine: sa.Engine, dataset: Dataset, kb: KnowledgeBaseRef, runs: Sequence[ClickRun], *,
                   batch_size: int = BATCH_SIZE, readers: int | None = None, dagster_run_id: str | None = None,
                   progress: Callable[[str, int], Progress | None] | None = None, logger=None,
                   on_result: Callable[[int, Result], None] | None = None,
                   processes: int | None = None) -> list[Result]:
    """Evaluate every run of the click (see the module doc); each strategy's outcome or error, in order.
    ``progress(version, cases)`` gives a strategy's progress callback; ``logger`` gets every process's log lines;
    ``on_result(i, result)`` is called in this process as soon as ``runs[i]`` is stored or failed (while the
    others still run; from another thread when ``runs[i]`` ran in a forked process)."""
    logger = logger or log
    runs = tuple(runs)
    options = {"batch_size": batch_size, "readers": readers, "dagster_run_id": dagster_run_id}
    results: list[Result | None] = [None] * len(runs)

    def here(i: int) -> None:
        results[i] = _evaluate(engine, dataset, kb, runs[i], options, logger,
                               progress(runs[i].strategy.version, len(dataset.cases)) if progress else None)
        if on_result:
            on_result(i, results[i])  # type: ignore[arg-type]

    can_fork = "fork" in multiprocessing.get_all_start_methods()
    fork = [i for i, r in enumerate(runs) if can_fork and forkable(kb, r.strategy)]
    if len(fork) > 1:
        for i in _embedding_leads(engine, dataset, runs, fork):  # they embed the questions, stored for the rest
            here(i)
            fork.remove(i)
    groups = lanes(runs, fork)
    workers = processes if processes is not None else click_processes(len(groups))
    if workers > 1 and len(groups) > 1:
        load_leg_indexes(engine, kb, [runs[i].strategy for i in fork], readers=readers, logger=logger)
        with gc_pause.frozen():  # the children share the indexes' pages: their collector leaves them alone
            for i, result in _in_processes(engine, dataset, kb, runs, groups, workers, options, progress, logger,
                                           on_result):
                results[i] = result
    for i in range(len(runs)):
        if results[i] is None:
            here(i)
    return [r for r in results if r is not None]


def _embedding_leads(engine: sa.Engine, dataset: Dataset, runs: Sequence[ClickRun], fork: list[int]) -> list[int]:
    """Per embedding model whose question vectors are not all stored, its first strategy among ``fork``."""
    questions = [c.question for c in dataset.cases]
    leads: dict[str, int] = {}
    for i in fork:
        s = runs[i].strategy
        if s.vector_candidate_k and s.embedding_model not in leads:
            leads[s.embedding_model] = i
    return [i for model, i in leads.items() if unembedded(engine, model, questions)]


def _evaluate(engine: sa.Engine, dataset: Dataset, kb: KnowledgeBaseRef, run: ClickRun, options: dict, logger,
              progress: Progress | None) -> Result:
    try:
        return evaluate_dataset(engine, dataset, run.strategy, kb=kb, queued_run_id=run.queued_run_id,
                                partition_key=run.partition_key, progress=progress, logger=logger, **options)
    except Exception as exc:  # noqa: BLE001 - the caller gets it with the strategy's place; the others go on
        return exc


def _in_processes(engine: sa.Engine, dataset: Dataset, kb: KnowledgeBaseRef, runs: tuple[ClickRun, ...],
                  groups: list[list[int]], workers: int, options: dict,
                  progress: Callable[[str, int], Progress | None] | None, logger,
                  on_result: Callable[[int, Result], None] | None) -> list[tuple[int, Result]]:
    """Each group in a forked process (at most ``workers`` at once); their progress, log lines and results relayed
    here."""
    global _click  # noqa: PLW0603 - what the forked processes inherit
    context = multiprocessing.get_context("fork")
    events = context.SimpleQueue()
    bars = {runs[i].strategy.version: progress(runs[i].strategy.version, len(dataset.cases)) if progress else None
            for group in groups for i in group}
    failed: list[BaseException] = []  # a callback's error on the relay thread, raised here
    relay = threading.Thread(target=_relay, args=(events, bars, logger, on_result, failed), name="rag-click-relay",
                             daemon=True)
    with _forking:
        _click = _Click(engine, dataset, kb, runs, options, events)
        relay.start()
        try:
            with ProcessPoolExecutor(workers, mp_context=context, initializer=forget_parent_connections) as pool:
                done = [item for lane in pool.map(_lane, groups) for item in lane]
        finally:
            events.put(None)
            relay.join()
            _click = None
    if failed:
        raise failed[0]
    return done


def _relay(events, bars: dict[str, Progress | None], logger, on_result: Callable[[int, Result], None] | None,
           failed: list[BaseException]) -> None:
    """This process's side of the forked processes' events: progress to the bars, log lines to ``logger``, each
    strategy's result to ``on_result``; the first error of a callback is kept in ``failed`` (no more callbacks)."""
    while (event := events.get()) is not None:
        if failed:
            continue  # drained to the end: the forked processes never block on a full pipe
        kind, version, *rest = event
        try:
            if kind == "progress" and bars.get(version):
                bars[version](*rest)  # type: ignore[misc]
            elif kind == "log":
                level, message = rest
                {logging.WARNING: logger.warning, logging.ERROR: logger.error}.get(level, logger.info)(message)
            elif kind == "result" and on_result:
                on_result(*rest)
        except BaseException as exc:  # noqa: BLE001 - raised by the click's own thread once the processes end
            failed.append(exc)


class _RelayedLog:
    """A forked process's logger: its lines go to the click's process, which logs them."""

    def __init__(self, events, version: str):
        self.events, self.version = events, version

    def _put(self, level: int, message: object) -> None:
        self.events.put(("log", self.version, level, str(message)))

    def info(self, message: object, *_args, **_kwargs) -> None:
        self._put(logging.INFO, message)

    def warning(self, message: object, *_args, **_kwargs) -> None:
        self._put(logging.WARNING, message)

    def error(self, message: object, *_args, **_kwargs) -> None:
        self._put(logging.ERROR, message)

    debug = info


def _lane(group: list[int]) -> list[tuple[int, Result]]:
    """In a forked process: the group's strategies, one after the other."""
    click = _click
    assert click is not None, "a click lane runs only in a process forked by evaluate_click"
    done: list[tuple[int, Result]] = []
    for i in group:
        version = click.runs[i].strategy.version

        def progress(cases: int, total: int, version: str = version) -> None:
            click.events.put(("progress", version, cases, total))

        result = _evaluate(click.engine, click.dataset, click.kb, click.runs[i], click.options,
                           _RelayedLog(click.events, version), progress)
        done.append((i, result if isinstance(result, EvaluationOutcome) else portable(result)))
        click.events.put(("result", version, *done[-1]))
    return done


_KINDS = (CheckFailed, DatabaseUnavailableError, ConflictError, NotFoundOrInvalidError, NotFoundError, BadInputError,
          RagError)


def portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling (the way back from a forked process), else an error of the same kind with
    the same message."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any class that cannot be rebuilt from its pickle
        kind = next((k for k in _KINDS if isinstance(exc, k)), None)
        return kind(str(exc)) if kind else RuntimeError(f"{type(exc).__name__}: {exc}")
