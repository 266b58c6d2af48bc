"""Evaluate an ``http`` strategy: its retriever is asked for every case not answered yet (each reply committed as
it comes, so a killed evaluation resumes without asking again), then the run is stored in one transaction as a
built-in strategy's is: the whole returned list as the pool, metrics, miss reasons, latencies (docs/strategies.md
"HTTP retrievers"). A case the retriever gives no ranking for is stored with its error; an endpoint that cannot be
reached fails the run with the reason."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import sqlalchemy as sa

from rag_pipeline.contracts.runs import RetrieverCounts, RunCounts
from rag_pipeline.evaluation.datasets.label_check import check_labels, relevant_ids_missing
from rag_pipeline.evaluation.datasets.load import Dataset, EvaluationCase
from rag_pipeline.evaluation.diagnosis import miss_reasons as diagnosis
from rag_pipeline.evaluation.diagnosis.diagnose import RunDiagnosisTally
from rag_pipeline.evaluation.evaluate import EvaluationOutcome, Progress, case_metrics, check_cases
from rag_pipeline.evaluation.metrics import METRIC_NAMES
from rag_pipeline.evaluation.queries import http_replies
from rag_pipeline.evaluation.queries import trec as trec_queries
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.evaluation.runs import queries as run_queries
from rag_pipeline.evaluation.runs import results as persistence
from rag_pipeline.evaluation.trec.lines import chunk_key, key_prefix
from rag_pipeline.knowledge_base import catalogue
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseRef, resolve_knowledge_base
from rag_pipeline.knowledge_base.versions import content_version
from rag_pipeline.retrieval.http_retriever import EndpointDownError, Question, Ranking, RetrieverClient
from rag_pipeline.retrieval.strategies import Strategy
from rag_pipeline.retrieval.strategy_store import register_strategy
from rag_pipeline.retrieval.trace import Candidate, RetrievalError, RetrievalTrace

KEEP_EVERY = 32
KEEP_AFTER_S = 0.25
"""Replies are kept (committed) together, at most this many or this late: a kill loses little to ask again."""
FAILURE_EXAMPLES = 5


def evaluate_http(engine: sa.Engine, dataset: Dataset, strategy: Strategy, *, partition_key: str | None,
                  dagster_run_id: str | None, progress: Progress | None, logger, queued_run_id: str | None,
                  kb: KnowledgeBaseRef | None, environ: Mapping[str, str] | None = None) -> EvaluationOutcome:
    """Ask and store; see the module docstring. ``environ``: where ``env:`` header values are read."""
    assert strategy.http is not None
    t_start = time.perf_counter()
    run_records.sweep_gone(engine)
    run_records.sweep_abandoned(engine)
    check_cases(dataset)
    client = RetrieverClient(strategy.http, environ)  # a header variable not set: an error before any run row
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, kb or dataset.knowledge_base)
        missing = relevant_ids_missing(conn, kb.id, dataset)
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
    logger.info(f"evaluation run {run_id}: {len(dataset.cases)} cases of {dataset.name!r} on {kb.name!r} with the "
                f"HTTP retriever {strategy.version}")
    try:
        with run_records.Heartbeat(engine, run_id):
            t = time.perf_counter()
            rankings, resumed = _collect(engine, client, dataset, params_hash, dataset_id, run_id, progress)
            outcome.timings["retrieval_wall_s"] = time.perf_counter() - t
            _store(engine, run_id, dataset, kb, strategy, rankings, outcome, missing=missing, resumed=resumed,
                   dataset_id=dataset_id, t_start=t_start)
    except BaseException as exc:
        run_records.mark_failed(engine, run_id, run_records.failure_reason(exc))
        raise
    return outcome


def _collect(engine: sa.Engine, client: RetrieverClient, dataset: Dataset, params_hash: str, dataset_id, run_id,
             progress: Progress | None) -> tuple[dict[str, Ranking], int]:
    """Every case's ranking: the kept ones, then the others asked (successes kept in batches as they come)."""
    with engine.connect() as conn:
        rankings = {row.case_id: Ranking(row.case_id, row.ranking["ids"], row.ranking["scores"],
                                         row.ranking["stages"], row.latency_ms, row.attempts,
                                         texts=row.ranking.get("texts"), titles=row.ranking.get("titles"))
                    for row in http_replies.kept(conn, params_hash, dataset_id)}
    resumed = len(rankings)
    todo = [Question(c.case_id, c.question, c.k) for c in dataset.cases if c.case_id not in rankings]
    total = len(dataset.cases)

    def keep(batch: Sequence[Ranking]) -> None:
        with engine.begin() as conn:
            http_replies.keep(conn, params_hash, dataset_id, [
                (r.case_id, _kept(r), r.latency_ms or 0.0, r.attempts) for r in batch])
        run_records.heartbeat(engine, run_id, len(rankings))

    async def ask() -> None:
        pending: list[Ranking] = []
        last = time.monotonic()
        try:
            async with client:
                async for ranking in client.rankings(todo):
                    rankings[ranking.case_id] = ranking
                    if ranking.error is None:
                        pending.append(ranking)
                    if len(pending) >= KEEP_EVERY or (pending and time.monotonic() - last >= KEEP_AFTER_S):
                        batch, pending[:], last = list(pending), [], time.monotonic()
                        await asyncio.to_thread(keep, batch)
                    if progress:
                        progress(len(rankings), total)
        finally:
            if pending:
                await asyncio.to_thread(keep, pending)

    try:
        asyncio.run(ask())
    except EndpointDownError as exc:
        raise RetrievalError(f"{exc}; the {len(rankings)} case(s) answered are kept: evaluating again resumes") \
            from None
    return rankings, resumed


def _store(engine: sa.Engine, run_id, dataset: Dataset, kb, strategy: Strategy, rankings: Mapping[str, Ranking],
           outcome: EvaluationOutcome, *, missing: int, resumed: int, dataset_id, t_start: float) -> None:
    cases = dataset.cases
    failed = [(c.case_id, rankings[c.case_id].error) for c in cases if rankings[c.case_id].error is not None]
    if len(failed) == len(cases):
        raise RetrievalError(f"the retriever gave no ranking for any of the {len(cases)} cases (first: case "
                             f"{failed[0][0]}: {failed[0][1]})")
    t = time.perf_counter()
    prefix = key_prefix(kb.name)
    derived: dict[str, str] = {}
    traces = [_trace(case, rankings[case.case_id], strategy.version, prefix, derived) for case in cases]
    legs = tuple(leg for leg in diagnosis.LEGS if any(f"{leg}_scores" in rankings[c.case_id].stages
                                                       or f"{leg}_ranks" in rankings[c.case_id].stages
                                                       for c in cases))
    stats = RunCounts(relevant_ids_not_in_kb=missing)
    tally = RunDiagnosisTally(kb.name)
    with engine.begin() as conn:
        run_queries.create_candidate_partition(conn, run_id)
        outcome.knowledge_base_version = content_version(conn, kb.id).version
        run_queries.set_knowledge_base_version(conn, run_id, outcome.knowledge_base_version)
        trec_queries.remember_ids(conn, kb.id, sorted(derived.items()))
        catalogue_texts(conn, kb, [rankings[c.case_id] for c in cases])
        labels = check_labels(conn, kb, cases)
        statuses = labels.status_map()
        details = {(r.case_id, r.chunk_id): r.detail for r in labels.rows}
        reasons = [diagnosis.classify_misses(c, tr.candidates, label_statuses=statuses, label_details=details,
                                             legs=legs) for c, tr in zip(cases, traces, strict=True)]
        tally.add(labels, reasons)
        values = case_metrics(cases, traces)
        outcome.candidate_count = persistence.copy_candidates(conn, persistence.candidate_tuples(run_id, 0, cases,
                                                                                               traces))
        rows = persistence.case_rows(run_id, 0, cases, traces, values, reasons, stats)
        persistence.copy_case_results(conn, ((*row, rankings[c.case_id].latency_ms, rankings[c.case_id].error)
                                             for row, c in zip(rows, cases, strict=True)),
                                      persistence.HTTP_CASE_RESULT_COLUMNS)
        scored = sum(c.answerable for c in cases)
        outcome.averages = {m: float(v) for m, v in zip(METRIC_NAMES, values.sum(axis=0) / scored, strict=True)}
        outcome.case_count = len(cases)
        tally.add_to(stats, outcome.averages)
        stats.retriever = _counts(cases, rankings, resumed, failed)
        outcome.summary = stats
        outcome.timings["persistence_s"] = time.perf_counter() - t
        outcome.timings["total_s"] = time.perf_counter() - t_start
        outcome.timings = {k: round(v, 4) for k, v in outcome.timings.items()}
        persistence.finalize_run(conn, run_id, dataset_name=dataset.name, knowledge_base_name=kb.name,
                                 strategy_version=strategy.version, case_count=outcome.case_count,
                                 candidate_count=outcome.candidate_count, averages=outcome.averages,
                                 timings=outcome.timings, summary=stats)
        http_replies.forget(conn, outcome.params_hash, dataset_id)


def _kept(r: Ranking) -> dict[str, Any]:
    """A reply as ``http_retriever_replies`` keeps it (the texts and titles when the strategy reads them)."""
    kept: dict[str, Any] = {"ids": r.ids, "scores": r.scores, "stages": r.stages}
    if r.texts is not None:
        kept["texts"] = r.texts
    if r.titles is not None:
        kept["titles"] = r.titles
    return kept


def catalogue_texts(conn: sa.Connection, kb: KnowledgeBaseRef, rankings: Sequence[Ranking]) -> int:
    """Store the texts the retriever returned in the knowledge base's chunk catalogue (in the caller's transaction:
    the run's), for the ids that are no chunk of its own chunk table; an attached knowledge base's texts are its
    table's.
    Returns the chunks catalogued."""
    if kb.kind == "attached":
        return 0
    prefix = key_prefix(kb.name)
    texts: dict[str, tuple[str, str | None, str]] = {}
    for r in rankings:
        if r.error is not None or r.texts is None:
            continue
        titles = r.titles or [None] * len(r.ids)
        for raw, title, text in zip(r.ids, titles, r.texts, strict=True):
            texts[str(uuid.UUID(chunk_key(prefix, raw)[0]))] = (raw, title, text)
    own = catalogue.own_chunk_ids(conn, kb, list(texts)) if texts else set()
    return catalogue.store_texts(conn, kb, {c: t for c, t in texts.items() if c not in own})


def _trace(case: EvaluationCase, ranking: Ranking, version: str, prefix: bytes,
           derived: dict[str, str]) -> RetrievalTrace:
    """The returned list as the pool (ids that are not canonical UUIDs as their uuid5 chunk ids, as a TREC run's)."""
    pool = []
    stages = ranking.stages
    for i, (raw, score) in enumerate(zip(ranking.ids, ranking.scores, strict=True)):
        key, is_derived = chunk_key(prefix, raw)
        chunk = str(uuid.UUID(key))
        if is_derived:
            derived[chunk] = raw

        def stage(name: str, i: int = i) -> float | None:
            return stages[name][i] if name in stages else None

        def rank(name: str) -> int | None:
            value = stage(name)
            return None if value is None else int(value)

        pool.append(Candidate(chunk, "", "", i + 1, stage("vector_scores"), rank("vector_ranks"),
                              stage("keyword_scores"), rank("keyword_ranks"), stage("rerank_scores"), score, version))
    return RetrievalTrace(case.question, pool, pool[:case.k])


def _counts(cases: Sequence[EvaluationCase], rankings: Mapping[str, Ranking], resumed: int,
            failed: Sequence[tuple[str, str | None]]) -> RetrieverCounts:
    latencies = np.array([r.latency_ms for c in cases if (r := rankings[c.case_id]).latency_ms is not None])
    p50, p95, top = ((None, None, None) if not latencies.size else
                     (round(float(np.percentile(latencies, 50)), 3), round(float(np.percentile(latencies, 95)), 3),
                      round(float(latencies.max()), 3)))
    return RetrieverCounts(cases_asked=len(cases) - resumed, cases_resumed=resumed, failed_cases=len(failed),
                           failure_examples=[f"{case}: {why}" for case, why in failed[:FAILURE_EXAMPLES]],
                           latency_p50_ms=p50, latency_p95_ms=p95, latency_max_ms=top)
