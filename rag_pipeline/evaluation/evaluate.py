"""Evaluate one retrieval strategy on one dataset and store the run (the flow of docs/design.md §1): batches
pipelined over ``readers`` snapshot-sharing connections, one write transaction. Timings: docs/evaluating.md."""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import sqlalchemy as sa

from rag_pipeline.contracts.knowledge_base import KnowledgeBaseVersion
from rag_pipeline.contracts.metrics import Judged
from rag_pipeline.contracts.reports import MissReason
from rag_pipeline.contracts.runs import RunCounts, StageTimes
from rag_pipeline.evaluation import gc_pause, memory_budget, shared_indexes
from rag_pipeline.evaluation.datasets.label_check import LabelReport, check_labels, relevant_ids_missing
from rag_pipeline.evaluation.datasets.load import Dataset, EvaluationCase
from rag_pipeline.evaluation.datasets.strict_json import DatasetError, DatasetProblem
from rag_pipeline.evaluation.diagnosis import diagnose as diagnosis_db
from rag_pipeline.evaluation.metrics import METRIC_NAMES, evaluate_many
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.evaluation.runs import queries as run_queries
from rag_pipeline.evaluation.runs import results as persistence
from rag_pipeline.evaluation.runs.judged import judged_of_traces
from rag_pipeline.evaluation.runs.judged import summarize as summarize_judged
from rag_pipeline.evaluation.stage_times import share_readers, stage_times_of
from rag_pipeline.knowledge_base import catalogue
from rag_pipeline.knowledge_base.embedding import get_embedder
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseRef, resolve_knowledge_base
from rag_pipeline.knowledge_base.question_embeddings import QuestionVectors
from rag_pipeline.knowledge_base.versions import content_version
from rag_pipeline.retrieval.bm25_index import Bm25Index
from rag_pipeline.retrieval.dense_index import DenseIndex
from rag_pipeline.retrieval.leg_cache import LegCache
from rag_pipeline.retrieval.search import (
    RetrievalError,
    RetrievalTrace,
    StatementTimeout,
    hybrid_search_batch,
    is_statement_timeout,
    preflight,
    statement_timeout_message,
    walk_ahead,
)
from rag_pipeline.retrieval.stage_clock import StageClock
from rag_pipeline.retrieval.strategies import Strategy
from rag_pipeline.retrieval.strategy_store import register_strategy
from rag_pipeline.settings import get_settings
from rag_pipeline.storage.snapshot_readers import SnapshotReaders, check_capacity, reader_count, snapshot_readers

BATCH_SIZE = 64
TIMING_KEYS = ("embedding_s", "retrieval_wall_s", "retrieval_sql_s", "diagnosis_sql_s", "metrics_s",
               "persistence_s", "total_s")
PROGRESS_EVERY_S = 0.5
"""The stored ``cases_done`` of a running run moves at most this often (one commit each)."""
EXTRA_CONNECTIONS = 3
"""Connections a run holds besides its readers: writes, heartbeat, question-vector store."""
Progress = Callable[[int, int], None]  # (cases done, cases total)
log = logging.getLogger(__name__)


@dataclass
class EvaluationOutcome:
    run_id: str
    dataset_id: str
    dataset_name: str
    dataset_version: str
    knowledge_base_id: str
    knowledge_base: str
    strategy_version: str
    params_hash: str
    case_count: int = 0
    candidate_count: int = 0
    averages: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    summary: RunCounts = field(default_factory=RunCounts)
    knowledge_base_version: str | None = None
    stages: StageTimes | None = None


def evaluate_dataset(engine: sa.Engine, dataset: Dataset, strategy: Strategy, *, batch_size: int = BATCH_SIZE,
                     partition_key: str | None = None, dagster_run_id: str | None = None,
                     progress: Progress | None = None, logger=None, readers: int | None = None,
                     queued_run_id: str | None = None, kb: KnowledgeBaseRef | None = None) -> EvaluationOutcome:
    """Run ``strategy`` over every case of ``dataset`` and store the run. ``readers``: default ``RAG_EVAL_READERS``.
    ``queued_run_id``: the ``queued`` run row (made by the HTTP API) to use instead of a new one; it must be queued
    for this strategy and dataset version (else :class:`run_records.RunNotQueuedError`). ``kb``: the dataset's
    knowledge base as the caller resolved it (else resolved here)."""
    t_start = time.perf_counter()
    logger = logger or log
    if strategy.http is not None:  # the user's retriever over HTTP
        from rag_pipeline.evaluation.http_runs import evaluate_http  # noqa: PLC0415 - it builds on this module
        return evaluate_http(engine, dataset, strategy, partition_key=partition_key, dagster_run_id=dagster_run_id,
                             progress=progress, logger=logger, queued_run_id=queued_run_id, kb=kb)
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, kb or dataset.knowledge_base)
    if kb.kind == "attached":  # the user's own tables, read only
        from rag_pipeline.evaluation.attached_runs import evaluate_attached  # noqa: PLC0415 - it builds on this module
        return evaluate_attached(engine, dataset, strategy, kb, partition_key=partition_key,
                                 dagster_run_id=dagster_run_id, progress=progress, logger=logger,
                                 queued_run_id=queued_run_id, batch_size=batch_size)
    if catalogue.is_external(kb):  # a chunk catalogue only: nothing of ours to search
        raise RetrievalError(catalogue.no_built_in_strategy(kb, strategy.version))
    readers = reader_count(readers)
    check_capacity(engine, readers, EXTRA_CONNECTIONS)
    run_records.sweep_gone(engine)  # runs whose process fell silent (no heartbeat): failed, with that reason
    run_records.sweep_abandoned(engine)
    check_cases(dataset)
    with engine.connect() as conn:
        preflight(conn, kb, strategy)
        missing = relevant_ids_missing(conn, kb.id, dataset)
    if missing:
        logger.warning(f"{missing} relevant chunk id(s) of dataset {dataset.name!r} are not chunks of knowledge "
                       f"base {kb.name!r}: those cases cannot score (docs/design.md §8: check the ids)")
    with engine.begin() as conn:
        params_hash = register_strategy(conn, strategy)
        dataset_id = persistence.store_dataset(conn, dataset, kb.name)
    run_id: str | uuid.UUID
    if queued_run_id:
        run_id = queued_run_id
        run_records.start_queued_run(engine, run_id, strategy_version=strategy.version, params_hash=params_hash,
                                     dataset_id=dataset_id, dagster_run_id=dagster_run_id)
    else:
        run_id = run_records.create_run(engine, dataset_id=dataset_id, knowledge_base_id=kb.id, strategy=strategy,
                                 params_hash=params_hash, partition_key=partition_key, dagster_run_id=dagster_run_id)
    outcome = EvaluationOutcome(str(run_id), str(dataset_id), dataset.name, dataset.content_hash, str(kb.id),
                                kb.name, strategy.version, params_hash)
    logger.info(f"evaluation run {run_id}: {len(dataset.cases)} cases of {dataset.name!r} "
                f"(version {dataset.version}) on {kb.name!r} with {strategy.version}")
    try:
        with engine.begin() as conn:
            run_queries.create_candidate_partition(conn, run_id)
        with run_records.Heartbeat(engine, run_id):
            _run(engine, run_id, dataset, kb, strategy, outcome, batch_size, progress, logger,
                 missing=missing, t_start=t_start, readers=readers)
    except BaseException as exc:
        run_records.mark_failed(engine, run_id, run_records.failure_reason(exc))
        raise
    return outcome


def check_cases(dataset: Dataset) -> None:
    """A dataset a retrieval run can score: some case answerable, every answerable case labelled."""
    if not any(c.answerable for c in dataset.cases):
        raise DatasetError(dataset.source_path or dataset.name, [DatasetProblem(
            "every case is unanswerable (\"answerable\": false): no retrieval metric is defined, nothing was run "
            "(docs/design.md §12.1)", field="cases")])
    unlabelled = [c.case_id for c in dataset.cases if c.answerable and not c.relevant_chunk_ids]
    if unlabelled:  # a SQuAD / CMRC 2018 file names no chunk: it scores answers, not retrieval
        raise DatasetError(dataset.source_path or dataset.name, [DatasetProblem(
            f"{len(unlabelled)} answerable case(s) have no relevant chunk id (first: {unlabelled[0]!r}; a SQuAD or "
            "CMRC 2018 file labels no chunk): score its answers with `rag-pipeline answers evaluate`",
            field="cases")])


@dataclass
class _BatchResult:
    traces: list[RetrievalTrace]
    reasons: list[list[MissReason]]
    labels: LabelReport
    retrieval_s: float
    diagnosis_s: float
    clock: StageClock
    busy_s: float  # the whole task on its thread


@dataclass(frozen=True)
class _Legs:
    """What a run's batches search with, read in its snapshot: the content version, the in-memory indexes (None:
    that leg runs its SQL) and the remembered SQL vector legs of that version."""

    snapshot: KnowledgeBaseVersion
    keyword_index: Bm25Index | None
    vector_index: DenseIndex | None
    leg_cache: LegCache | None
    seconds: float


def _prepare_legs(pool_conns: SnapshotReaders, kb: KnowledgeBaseRef, strategy: Strategy, readers: int,
                  logger) -> _Legs:
    """Worker thread: the run's :class:`_Legs`, while the other readers walk the first batches' HNSW index."""
    t = time.perf_counter()
    snapshot = _snapshot_version(pool_conns, kb.id)
    keyword_index, vector_index = leg_indexes(pool_conns, kb, snapshot, strategy, readers, logger)
    legs = shared_indexes.leg_cache(kb.id, snapshot.version) if strategy.vector_candidate_k else None
    return _Legs(snapshot, keyword_index, vector_index, legs, time.perf_counter() - t)


def _search_batch(readers: SnapshotReaders, kb, strategy: Strategy, batch: Sequence[EvaluationCase],
                  vectors, prepared: Future[_Legs]) -> _BatchResult:
    """Worker thread: one batch's retrieval and miss diagnosis; a statement timeout is a :class:`RetrievalError`
    naming the case. A batch that comes before its run's indexes are ready walks the HNSW index already
    (:func:`~rag_pipeline.retrieval.search.walk_ahead`), on a connection it gives back while it waits."""
    t_task, clock = time.perf_counter(), StageClock()
    try:
        first_walk, walked_s = None, 0.0
        if not prepared.done() and strategy.keyword_candidate_k and keyword_in_memory():
            with readers.borrow() as conn:
                t = time.perf_counter()
                first_walk = walk_ahead(conn, kb.id, strategy, vectors)
                walked_s = time.perf_counter() - t
                clock.add("vector_leg", walked_s)
        legs = prepared.result()
        with readers.borrow() as conn:
            t = time.perf_counter()
            traces = hybrid_search_batch(conn, knowledge_base_id=kb.id, queries=[c.question for c in batch],
                                         strategy=strategy, limits=[c.k for c in batch], query_vectors=vectors,
                                         keyword_index=legs.keyword_index, vector_index=legs.vector_index,
                                         clock=clock, leg_cache=legs.leg_cache, first_walk=first_walk)
            t_search = time.perf_counter()
            labels = check_labels(conn, kb, batch)
            reasons = diagnosis_db.diagnose_batch(conn, kb, strategy, batch, [tr.candidates for tr in traces],
                                                  labels, query_vectors=vectors)
            now = time.perf_counter()
            clock.add("diagnosis", now - t_search)
            return _BatchResult(traces, reasons, labels, walked_s + t_search - t, now - t_search, clock, now - t_task)
    except (StatementTimeout, sa.exc.OperationalError) as exc:
        if not isinstance(exc, StatementTimeout) and not is_statement_timeout(exc):
            raise
        if isinstance(exc, StatementTimeout) and exc.whole_scan:  # every question takes as long: no culprit
            raise RetrievalError(f"{_cases_label(batch, culprit=False)}: {exc}") from None
        raise RetrievalError(f"{_cases_label(batch)}: {statement_timeout_message()}") from None


def _cases_label(batch: Sequence[EvaluationCase], *, culprit: bool = True) -> str:
    """``case <id>``; in a batch, the case of the longest question (the likely culprit) and the batch's ends, or
    (``culprit=False``) the batch's ends alone."""
    if len(batch) == 1:
        return f"case {batch[0].case_id}"
    ends = f"the batch of {len(batch)} cases {batch[0].case_id} … {batch[-1].case_id}"
    if not culprit:
        return ends
    longest = max(batch, key=lambda c: len(c.question))
    return f"case {longest.case_id} (the longest question of {ends})"


def _run(engine, run_id, dataset: Dataset, kb, strategy: Strategy, outcome: EvaluationOutcome,
         batch_size: int, progress: Progress | None, logger, *, missing: int, t_start: float, readers: int) -> None:
    timings = dict.fromkeys(TIMING_KEYS[:-1], 0.0)
    clock, on_readers = StageClock(), StageClock()  # the main thread's stages; the reader threads' (summed)
    clock.add("prepare", time.perf_counter() - t_start)
    sums = np.zeros(len(METRIC_NAMES))
    stats = RunCounts(batch_size=batch_size, readers=readers, relevant_ids_not_in_kb=missing)
    total = len(dataset.cases)
    scored = sum(c.answerable for c in dataset.cases)  # the averages' denominator (docs/design.md §12.1)
    starts = list(range(0, total, batch_size))
    embedder = (QuestionVectors(engine, get_embedder(strategy.embedding_model))
                if strategy.vector_candidate_k else None)
    tally = diagnosis_db.RunDiagnosisTally(kb.name)
    pending: deque = deque()
    with snapshot_readers(engine, readers) as pool_conns, engine.begin() as writer, \
            ThreadPoolExecutor(max_workers=readers, thread_name_prefix="rag-eval") as workers:
        # the version of what every reader sees (one exported snapshot) and the indexes, on one reader while the
        # others start walking the HNSW index
        prepared = workers.submit(_prepare_legs, pool_conns, kb, strategy, readers, logger)
        todo = iter(starts)

        def submit() -> None:
            """Embed the next batch (main thread) and hand its SQL to a worker."""
            start = next(todo, None)
            if start is None:
                return
            batch = dataset.cases[start:start + batch_size]
            vectors = None
            if embedder:
                t = time.perf_counter()
                vectors = embedder.vectors([c.question for c in batch])
                clock.add("question_embedding", _tick(timings, "embedding_s", t) - t)
            pending.append((start, batch, workers.submit(_search_batch, pool_conns, kb, strategy, batch, vectors,
                                                         prepared)))

        waited, busy = 0.0, 0.0  # the main thread's wait for the readers; the readers' busy seconds
        cases: list[tuple] = []  # the case-result rows, one COPY after the pools'
        judged: list[Judged] = []  # each answerable case's judged shares, as its pool is written
        chunk_fields: dict[str, bytes] = {}
        t_loop = last_progress = time.perf_counter()
        with persistence.candidate_copy(writer) as write_pools, gc_pause.frozen():  # the pools: one COPY
            try:
                for _ in range(readers):
                    submit()
                t = time.perf_counter()
                legs = prepared.result()
                clock.add("index_load", time.perf_counter() - t)  # what the run waited for; the walks went on
                timings["retrieval_sql_s"] += legs.seconds
                outcome.knowledge_base_version = legs.snapshot.version
                with engine.begin() as conn:
                    run_queries.set_knowledge_base_version(conn, run_id, outcome.knowledge_base_version)
                while pending:
                    start, batch, future = pending.popleft()
                    submit()  # keep every reader busy while this batch is scored and written
                    t = time.perf_counter()
                    result = future.result()
                    waited += time.perf_counter() - t
                    busy += result.busy_s
                    on_readers.merge(result.clock)
                    timings["retrieval_sql_s"] += result.retrieval_s
                    timings["diagnosis_sql_s"] += result.diagnosis_s
                    tally.add(result.labels, result.reasons)
                    t = time.perf_counter()
                    values = case_metrics(batch, result.traces)
                    sums += values.sum(axis=0)
                    t_metrics = t
                    t = _tick(timings, "metrics_s", t)
                    clock.add("metrics", t - t_metrics)
                    outcome.candidate_count += write_pools(
                        persistence.candidate_tuples(run_id, start, batch, result.traces, chunk_fields))
                    cases.extend(persistence.case_rows(run_id, start, batch, result.traces, values, result.reasons,
                                                       stats))
                    judged.extend(judged_of_traces(batch, result.traces))
                    clock.add("candidate_write", _tick(timings, "persistence_s", t) - t)
                    outcome.case_count += len(batch)
                    if time.perf_counter() - last_progress >= PROGRESS_EVERY_S:  # the run's end writes the last
                        run_records.heartbeat(engine, run_id, outcome.case_count)
                        last_progress = time.perf_counter()
                    if progress:
                        progress(outcome.case_count, total)
                    if (start // batch_size) % 10 == 9:
                        logger.info(f"{outcome.case_count}/{total} cases evaluated")
            except BaseException:
                for _, _, future in pending:
                    future.cancel()
                raise
            t = time.perf_counter()
        persistence.copy_case_results(writer, cases)
        clock.add("candidate_write", _tick(timings, "persistence_s", t) - t)
        timings["retrieval_wall_s"] = time.perf_counter() - t_loop
        share_readers(clock, on_readers, waited, busy)
        t_summary = time.perf_counter()
        averages = sums / scored
        outcome.averages = {m: float(v) for m, v in zip(METRIC_NAMES, averages, strict=True)}
        timings["total_s"] = time.perf_counter() - t_start
        outcome.timings = {k: round(v, 4) for k, v in timings.items()}
        tally.add_to(stats, outcome.averages)
        stats.question_embeddings = embedder.summary() if embedder else None
        outcome.summary = stats

        def stage_times() -> StageTimes:
            now = time.perf_counter()
            clock.add("summary_write", now - t_summary)
            outcome.stages = stage_times_of(clock, now - t_start)
            return outcome.stages

        persistence.finalize_run(
            writer, run_id, dataset_name=dataset.name, knowledge_base_name=kb.name,
            strategy_version=strategy.version, case_count=outcome.case_count,
            candidate_count=outcome.candidate_count, averages=outcome.averages,
            timings=outcome.timings, summary=outcome.summary, stages=stage_times, judged=summarize_judged(judged))


def leg_indexes(pool_conns: SnapshotReaders, kb: KnowledgeBaseRef, snapshot: KnowledgeBaseVersion,
                strategy: Strategy, readers: int, logger) -> tuple[Bm25Index | None, DenseIndex | None]:
    """The in-memory indexes ``strategy``'s legs run on (None: that leg runs its SQL statement), from this process's
    :mod:`shared_indexes` or loaded on ``pool_conns``' snapshot (whose content version is ``snapshot``: its
    searchable vectors per model size the exact leg's index)."""
    keyword_index, vector_index = None, None
    kb_version = snapshot.version
    model = strategy.embedding_model

    def load_postings() -> Bm25Index:
        with pool_conns.borrow() as conn:
            return Bm25Index.load(conn, kb.id, strategy.bm25_k1, strategy.bm25_b,
                                  borrow=pool_conns.borrow, parts=readers)

    def load_vectors() -> DenseIndex:
        with pool_conns.borrow() as conn:
            return DenseIndex.load(conn, kb.id, strategy.embedding_model)

    keyword_key = ("bm25", str(kb.id), kb_version, strategy.bm25_k1, strategy.bm25_b)
    vector_key = ("vectors", str(kb.id), kb_version, strategy.embedding_model)
    if strategy.keyword_candidate_k and keyword_in_memory() and _fits(
            pool_conns, keyword_key, "the keyword leg", logger,
            lambda conn: memory_budget.keyword_index_bytes(conn, kb.id)):  # postings once, on the snapshot
        keyword_index = shared_indexes.shared(keyword_key, load_postings)
    if strategy.vector_candidate_k and exact_in_memory(strategy) and _fits(
            pool_conns, vector_key, "the exact vector leg", logger,
            lambda conn: memory_budget.vector_index_bytes(conn, model, snapshot.embeddings.get(model, 0))):
        vector_index = shared_indexes.shared(vector_key, load_vectors)
    return keyword_index, vector_index


def load_leg_indexes(engine: sa.Engine, kb: KnowledgeBaseRef, strategies: Sequence[Strategy], *,
                     readers: int | None = None, logger=None) -> str:
    """Load into this process's :mod:`shared_indexes` every in-memory index ``strategies`` would load on ``kb``
    (before a click's strategies are handed to forked processes, which then share them); the content version."""
    readers = reader_count(readers)
    with snapshot_readers(engine, readers) as pool_conns:
        snapshot = _snapshot_version(pool_conns, kb.id)
        for strategy in strategies:
            leg_indexes(pool_conns, kb, snapshot, strategy, readers, logger or log)
    return snapshot.version


def _fits(readers: SnapshotReaders, key, leg: str, logger, need) -> bool:
    """The index of ``key`` is held already, or its estimated size (``need(conn)``) fits the memory budget."""
    if shared_indexes.held(key):
        return True
    with readers.borrow() as conn:
        return memory_budget.fits(leg, need(conn), logger)


def keyword_in_memory() -> bool:
    """The keyword leg (BM25 or ts_rank_cd) runs in memory: ``RAG_KEYWORD_LEG=memory``, the default."""
    return get_settings().keyword_leg == "memory"


def exact_in_memory(strategy: Strategy) -> bool:
    """The strategy's vector leg runs in memory: ``vector_search: exact`` and ``RAG_EXACT_VECTOR_LEG=memory``."""
    return strategy.vector_search == "exact" and get_settings().exact_vector_leg == "memory"


def _snapshot_version(readers: SnapshotReaders, kb_id) -> KnowledgeBaseVersion:
    with readers.borrow() as conn:  # the run's KB version, read in its snapshot
        return content_version(conn, kb_id)


def _tick(timings: dict[str, float], key: str, since: float) -> float:
    now = time.perf_counter()
    timings[key] += now - since
    return now


def case_metrics(batch: Sequence[EvaluationCase], traces: Sequence[RetrievalTrace]) -> np.ndarray:
    """``(len(batch), len(METRIC_NAMES))``; the full pool is passed so R-precision can look past k. An
    unanswerable case has no metric: its row is 0, a storage placeholder (the columns are NOT NULL) that adds
    nothing to the sums and that every query reads as NULL (docs/design.md §12.1)."""
    values = np.zeros((len(batch), len(METRIC_NAMES)))
    scored = [i for i, c in enumerate(batch) if c.answerable]
    if scored:
        result = evaluate_many([[c.chunk_id for c in traces[i].candidates] for i in scored],
                               [batch[i].relevance for i in scored], [batch[i].k for i in scored])
        values[scored] = np.column_stack([result[m] for m in METRIC_NAMES])
    return values
