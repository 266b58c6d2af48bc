"""Evaluate a strategy on an attached knowledge base (the user's own tables, read only: docs/evaluating.md, "Your
own retriever"). The legs run as SQL in one read-only, repeatable-read transaction on the user's database, which
also gives the run its content record (row count and fingerprint); the run, its pools, metrics and miss reasons
are stored in the project's database in one transaction, as a built-in run's are.

A user chunk id that is not a canonical UUID is stored as its uuid5 (as a TREC run's document ids are) and
remembered, so labels, exports and the console show it as the user wrote it. The miss reasons come from the
pools (the legs' ranks and scores); the scores of relevant chunks no leg returned are not looked up."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence

import sqlalchemy as sa

from rag_pipeline.contracts.runs import RunCounts
from rag_pipeline.evaluation.datasets.label_check import check_labels
from rag_pipeline.evaluation.datasets.load import Dataset
from rag_pipeline.evaluation.diagnosis import miss_reasons as diagnosis
from rag_pipeline.evaluation.diagnosis.diagnose import RunDiagnosisTally
from rag_pipeline.evaluation.evaluate import BATCH_SIZE, EvaluationOutcome, Progress, case_metrics, check_cases
from rag_pipeline.evaluation.metrics import METRIC_NAMES
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.evaluation.runs import queries as run_queries
from rag_pipeline.evaluation.runs import results as persistence
from rag_pipeline.knowledge_base import attached as attached_kb
from rag_pipeline.knowledge_base.embedding import get_embedder
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseRef
from rag_pipeline.knowledge_base.question_embeddings import QuestionVectors
from rag_pipeline.retrieval.attached_search import check_strategy, search_batch
from rag_pipeline.retrieval.strategies import Strategy
from rag_pipeline.retrieval.strategy_store import register_strategy
from rag_pipeline.retrieval.trace import Candidate, RetrievalTrace


def evaluate_attached(engine: sa.Engine, dataset: Dataset, strategy: Strategy, kb: KnowledgeBaseRef, *,
                      partition_key: str | None, dagster_run_id: str | None, progress: Progress | None, logger,
                      queued_run_id: str | None, environ: Mapping[str, str] | None = None,
                      batch_size: int = BATCH_SIZE) -> EvaluationOutcome:
    """Search, score and store; see the module docstring. ``environ``: where the URL variable is read."""
    t_start = time.perf_counter()
    run_records.sweep_gone(engine)
    run_records.sweep_abandoned(engine)
    check_cases(dataset)
    with engine.connect() as conn:
        attached = attached_kb.load(conn, kb)
        assert attached is not None
        check_strategy(attached, strategy)
    with attached_kb.read_only(attached, environ) as user:  # a missing table or column: named, nothing stored
        for warning in attached_kb.check_mapping(user, attached.mapping):
            logger.warning(warning)
    with engine.connect() as conn:
        labels = check_labels(conn, kb, dataset.cases)
        targets = attached_kb.user_ids(conn, attached,
                                       sorted({i for c in dataset.cases for i in c.relevant_chunk_ids}))
    embedder = QuestionVectors(engine, get_embedder(strategy.embedding_model)) if strategy.vector_candidate_k else None
    missing = sum(r.status == "unknown_id" for r in labels.rows)
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
                                        params_hash=params_hash, partition_key=partition_key,
                                        dagster_run_id=dagster_run_id)
    outcome = EvaluationOutcome(str(run_id), str(dataset_id), dataset.name, dataset.content_hash, str(kb.id),
                                kb.name, strategy.version, params_hash)
    logger.info(f"evaluation run {run_id}: {len(dataset.cases)} cases of {dataset.name!r} on attached knowledge "
                f"base {kb.name!r} with {strategy.version}")
    cases = dataset.cases
    try:
        with run_records.Heartbeat(engine, run_id):
            traces: list[RetrievalTrace] = []
            t = time.perf_counter()
            with attached_kb.read_only(attached, environ) as user:
                seen = attached_kb.content(user, attached.mapping)
                for start in range(0, len(cases), batch_size):
                    batch = cases[start:start + batch_size]
                    vectors = embedder.vectors([c.question for c in batch]) if embedder else None
                    traces += search_batch(user, attached, [c.question for c in batch], strategy,
                                           [c.k for c in batch], vectors,
                                           [[targets[i] for i in c.relevant_chunk_ids] for c in batch])
                    run_records.heartbeat(engine, run_id, len(traces))
                    if progress:
                        progress(len(traces), len(cases))
            outcome.timings["retrieval_wall_s"] = time.perf_counter() - t
            stats = RunCounts(batch_size=batch_size, relevant_ids_not_in_kb=missing,
                              question_embeddings=embedder.summary() if embedder else None)
            _store(engine, run_id, dataset, kb, strategy, traces, labels, outcome, seen=seen, t_start=t_start,
                   stats=stats)
    except BaseException as exc:
        run_records.mark_failed(engine, run_id, run_records.failure_reason(exc))
        raise
    return outcome


def _as_project(trace: RetrievalTrace, ids: Mapping[str, str]) -> RetrievalTrace:
    """The trace with the user's chunk ids as chunk UUIDs (``ids``: :func:`attached_kb.remember`)."""
    pool = [Candidate(ids[c.chunk_id], c.document_id, c.document_name, c.rank, c.vector_score, c.vector_rank,
                      c.keyword_score, c.keyword_rank, c.rerank_score, c.final_score, c.strategy_version)
            for c in trace.candidates]
    return RetrievalTrace(trace.question, pool, pool[:len(trace.selected)])


def _store(engine: sa.Engine, run_id, dataset: Dataset, kb: KnowledgeBaseRef, strategy: Strategy,
           user_traces: Sequence[RetrievalTrace], labels, outcome: EvaluationOutcome, *, seen,
           t_start: float, stats: RunCounts) -> None:
    cases = dataset.cases
    t = time.perf_counter()
    with engine.begin() as conn:  # the derived ids are remembered at once: labels and exports read them back
        ids = attached_kb.remember(conn, kb, sorted({c.chunk_id for tr in user_traces for c in tr.candidates}))
    traces = [_as_project(tr, ids) for tr in user_traces]
    statuses = labels.status_map()
    details = {(r.case_id, r.chunk_id): r.detail for r in labels.rows}
    legs = diagnosis.legs_of(strategy)
    reasons = [diagnosis.classify_misses(c, tr.candidates, label_statuses=statuses, label_details=details, legs=legs)
               for c, tr in zip(cases, traces, strict=True)]
    tally = RunDiagnosisTally(kb.name)
    tally.add(labels, reasons)
    values = case_metrics(cases, traces)
    with engine.begin() as conn:
        run_queries.create_candidate_partition(conn, run_id)
        outcome.knowledge_base_version = seen.fingerprint
        run_queries.set_knowledge_base_version(conn, run_id, seen.fingerprint)
        outcome.candidate_count = persistence.copy_candidates(conn, persistence.candidate_tuples(run_id, 0, cases,
                                                                                               traces))
        persistence.copy_case_results(conn, persistence.case_rows(run_id, 0, cases, traces, values, reasons, stats))
        scored = sum(c.answerable for c in cases)
        outcome.averages = {m: float(v) for m, v in zip(METRIC_NAMES, values.sum(axis=0) / scored, strict=True)}
        outcome.case_count = len(cases)
        tally.add_to(stats, outcome.averages)
        stats.attached = seen
        outcome.summary = stats
        outcome.timings["persistence_s"] = time.perf_counter() - t
        outcome.timings["total_s"] = time.perf_counter() - t_start
        outcome.timings = {k: round(v, 4) for k, v in outcome.timings.items()}
        persistence.finalize_run(conn, run_id, dataset_name=dataset.name, knowledge_base_name=kb.name,
                                 strategy_version=strategy.version, case_count=outcome.case_count,
                                 candidate_count=outcome.candidate_count, averages=outcome.averages,
                                 timings=outcome.timings, summary=stats)
