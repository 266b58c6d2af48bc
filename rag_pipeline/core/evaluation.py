"""Evaluate one retrieval strategy on one dataset and store the run (shared by the Dagster assets and the CLI).

Flow of :func:`evaluate_dataset`:

1. Preflight, nothing written yet: the knowledge base exists, the strategy can search it (embeddings of
   its model, text-search mode), the embedder loads. Stale ``running`` runs are swept to ``abandoned``.
2. One short transaction: register the strategy version (:mod:`strategy_store`), store the dataset
   version, insert the run row with status ``running`` (visible while the run is in progress).
3. Cases in batches (:data:`BATCH_SIZE`): embed the questions, :func:`hybrid_search_batch` with each
   case's own k as limit, metrics (:func:`metrics.evaluate_many`), then COPY the full candidate pools and
   the case results. Reads use one REPEATABLE READ transaction (a consistent snapshot of the knowledge
   base even if it is re-ingested meanwhile); writes go to another connection's single transaction.
   Only running sums are kept, never the candidates of more than one batch. Heartbeat after each batch.
4. The write transaction ends with the summary, ``succeeded`` and ``is_current`` → commit. Any failure
   rolls it back (no candidate or case row survives) and marks the run ``failed`` with the error.

Timings stored with the run: ``embedding_s`` (question vectors), ``retrieval_s`` (both legs' SQL plus
fusion), ``metrics_s``, ``persistence_s`` (COPY), ``total_s`` (including preflight and model loading).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import sqlalchemy as sa

from rag_pipeline.core import diagnosis_db, persistence, retrieval_sql, runs
from rag_pipeline.core.dataset import Dataset, EvaluationCase
from rag_pipeline.core.embedding import get_embedder
from rag_pipeline.core.knowledge_base import resolve_knowledge_base
from rag_pipeline.core.metrics import METRIC_NAMES, evaluate_many
from rag_pipeline.core.retrieval import RetrievalError, RetrievalTrace, hybrid_search_batch, text_search_mode
from rag_pipeline.core.strategies import Strategy
from rag_pipeline.core.strategy_store import register_strategy

BATCH_SIZE = 64
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
    summary: dict = field(default_factory=dict)


def evaluate_dataset(
    engine: sa.Engine,
    dataset: Dataset,
    strategy: Strategy,
    *,
    batch_size: int = BATCH_SIZE,
    partition_key: str | None = None,
    dagster_run_id: str | None = None,
    progress: Progress | None = None,
    logger=None,
) -> EvaluationOutcome:
    """Run ``strategy`` over every case of ``dataset`` (against ``dataset.knowledge_base``) and store the run."""
    logger = logger or log
    t_start = time.perf_counter()
    runs.sweep_abandoned(engine)
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, dataset.knowledge_base)
        _preflight(conn, kb, strategy)
        missing = relevant_ids_missing(conn, kb.id, dataset)
    if missing:
        logger.warning(f"{missing} relevant chunk id(s) of dataset {dataset.name!r} are not chunks of knowledge "
                       f"base {kb.name!r}: those cases cannot score (seed §8: check the ids)")
    with engine.begin() as conn:
        params_hash = register_strategy(conn, strategy)
        dataset_id = persistence.store_dataset(conn, dataset, kb.name)
    run_id = runs.create_run(engine, dataset_id=dataset_id, knowledge_base_id=kb.id, strategy=strategy,
                             params_hash=params_hash, partition_key=partition_key, dagster_run_id=dagster_run_id)
    outcome = EvaluationOutcome(str(run_id), str(dataset_id), dataset.name, dataset.content_hash, str(kb.id),
                                kb.name, strategy.version, params_hash)
    logger.info(f"evaluation run {run_id}: {len(dataset.cases)} cases of {dataset.name!r} "
                f"(version {dataset.version}) on {kb.name!r} with {strategy.version}")
    try:
        _run(engine, run_id, dataset, kb, strategy, outcome, batch_size, progress, logger,
             extra={"relevant_ids_not_in_kb": missing}, t_start=t_start)
    except BaseException as exc:
        runs.mark_failed(engine, run_id, f"{type(exc).__name__}: {exc}")
        raise
    return outcome


def _preflight(conn: sa.Connection, kb: sa.Row, strategy: Strategy) -> None:
    """Fail before writing anything when the strategy cannot search this knowledge base."""
    text_search_mode(kb, strategy)
    if strategy.vector_candidate_k:
        params = {"kb": kb.id, "model": strategy.embedding_model}
        if not conn.execute(sa.text(retrieval_sql.HAS_EMBEDDINGS_SQL), params).scalar():
            raise RetrievalError(
                f"knowledge base {kb.name!r} has no embeddings of model {strategy.embedding_model!r}, which "
                f"strategy {strategy.version} uses; ingest it with --models {strategy.embedding_model} "
                "or pick another strategy")
        get_embedder(strategy.embedding_model)


def relevant_ids_missing(conn: sa.Connection, kb_id, dataset: Dataset) -> int:
    ids = sorted({i for c in dataset.cases for i in c.relevant_chunk_ids})
    return conn.execute(sa.text(
        "SELECT count(*) FROM unnest(CAST(:ids AS uuid[])) AS u(id) "
        "WHERE NOT EXISTS (SELECT 1 FROM document_chunks c WHERE c.id = u.id AND c.knowledge_base_id = :kb)"
    ), {"ids": ids, "kb": kb_id}).scalar_one()


def _run(engine, run_id, dataset: Dataset, kb, strategy: Strategy, outcome: EvaluationOutcome,
         batch_size: int, progress: Progress | None, logger, *, extra: dict, t_start: float) -> None:
    timings = dict.fromkeys(("embedding_s", "retrieval_s", "metrics_s", "persistence_s"), 0.0)
    sums = np.zeros(len(METRIC_NAMES))
    stats = {"cases_with_hit": 0, "cases_without_candidates": 0, "relevant_in_pool": 0, "relevant_total": 0}
    total = len(dataset.cases)
    embedder = get_embedder(strategy.embedding_model) if strategy.vector_candidate_k else None
    reader = engine.connect().execution_options(isolation_level="REPEATABLE READ")
    try:
        with reader.begin(), engine.begin() as writer:
            for start in range(0, total, batch_size):
                batch = dataset.cases[start:start + batch_size]
                t = time.perf_counter()
                vectors = embedder.embed([c.question for c in batch]) if embedder else None
                t = _tick(timings, "embedding_s", t)
                traces = hybrid_search_batch(reader, knowledge_base_id=kb.id, queries=[c.question for c in batch],
                                             strategy=strategy, limits=[c.k for c in batch], query_vectors=vectors)
                t = _tick(timings, "retrieval_s", t)
                values = _metrics(batch, traces)
                sums += values.sum(axis=0)
                t = _tick(timings, "metrics_s", t)
                outcome.candidate_count += persistence.copy_candidates(
                    writer, _candidate_rows(run_id, batch, traces))
                persistence.copy_case_results(writer, _case_rows(run_id, start, batch, traces, values, stats))
                _tick(timings, "persistence_s", t)
                outcome.case_count += len(batch)
                runs.heartbeat(engine, run_id)
                if progress:
                    progress(outcome.case_count, total)
                if start and (start // batch_size) % 10 == 0:
                    logger.info(f"{outcome.case_count}/{total} cases evaluated")
            averages = sums / max(total, 1)
            outcome.averages = {m: float(v) for m, v in zip(METRIC_NAMES, averages, strict=True)}
            timings["total_s"] = time.perf_counter() - t_start
            outcome.timings = {k: round(v, 4) for k, v in timings.items()}
            outcome.summary = {
                "batch_size": batch_size,
                **stats,
                **extra,
            }
            # Miss reasons of every relevant chunk (stored per case) and the run's headline, before commit.
            diag = diagnosis_db.diagnose_run(writer, run_id, averages=outcome.averages)
            outcome.summary.update(diag.summary_metadata())
            persistence.finalize_run(
                writer, run_id, dataset_name=dataset.name, knowledge_base_name=kb.name,
                strategy_version=strategy.version, case_count=outcome.case_count,
                candidate_count=outcome.candidate_count, averages=outcome.averages,
                timings=outcome.timings, summary=outcome.summary)
    finally:
        reader.close()


def _tick(timings: dict[str, float], key: str, since: float) -> float:
    now = time.perf_counter()
    timings[key] += now - since
    return now


def _metrics(batch: Sequence[EvaluationCase], traces: Sequence[RetrievalTrace]) -> np.ndarray:
    """``(len(batch), len(METRIC_NAMES))``; the full pool is passed so R-precision can look past k."""
    result = evaluate_many([[c.chunk_id for c in t.candidates] for t in traces],
                           [set(c.relevant_chunk_ids) for c in batch], [c.k for c in batch])
    return np.column_stack([result[m] for m in METRIC_NAMES])


def _candidate_rows(run_id, batch: Sequence[EvaluationCase], traces: Sequence[RetrievalTrace]):
    for case, trace in zip(batch, traces, strict=True):
        relevant = set(case.relevant_chunk_ids)
        n_selected = len(trace.selected)
        for c in trace.candidates:
            yield (run_id, case.case_id, c.chunk_id, c.document_id, c.document_name, c.rank,
                   c.vector_score, c.vector_rank, c.keyword_score, c.keyword_rank, c.rerank_score, c.final_score,
                   c.chunk_id in relevant, c.rank <= n_selected, c.strategy_version)


def _case_rows(run_id, offset: int, batch: Sequence[EvaluationCase], traces: Sequence[RetrievalTrace],
               values: np.ndarray, stats: dict):
    for i, (case, trace) in enumerate(zip(batch, traces, strict=True)):
        relevant = set(case.relevant_chunk_ids)
        ranks = [c.rank for c in trace.candidates if c.chunk_id in relevant]
        stats["relevant_total"] += len(relevant)
        stats["relevant_in_pool"] += len(ranks)
        stats["cases_without_candidates"] += not trace.candidates
        stats["cases_with_hit"] += any(c.chunk_id in relevant for c in trace.selected)
        yield (run_id, case.case_id, offset + i, case.question, case.k, json.dumps(list(case.relevant_chunk_ids)),
               json.dumps([c.chunk_id for c in trace.selected]), min(ranks) if ranks else None,
               *(float(v) for v in values[i]))
