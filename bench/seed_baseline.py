"""The seed write-up's evaluation loop (retrieval and pool storage: docs/design.md §3.1, §4.2), rebuilt as
the baseline of ``bench/eval_bench.py``.

Benchmark code only — never used by the pipeline. For each case, one at a time, as the seed does:

1. embed the one question (``embed_query``);
2. one vector query and one keyword query, ORM ``select`` of whole ``DocumentChunk`` rows joined with
   ``Document.original_name`` and the seed's ``base_filters``, each ``LIMIT`` its candidate k;
3. merge and fuse in Python;
4. one ``session.add(RetrievalEvaluationCandidate(...))`` per candidate of the full pool, commit —
   one transaction (and one ORM session) per case; per-case metrics in plain Python.

So that the baseline and the pipeline produce the *same* candidates and scores (checked by the bench),
the queries use the pipeline's semantics, not a cheaper variant: the vector leg orders by the model's
``embedding::vector(dim) <=> q`` (partial HNSW index, the strategy's ``hnsw.ef_search``, iterative
scan), the keyword leg uses the project's OR-tsquery and ``ts_rank_cd(tsv, q, 32)`` with chunk-id ties,
and the merge is :func:`rag_pipeline.retrieval.search.fuse_pool` (core fusion and tie-break).
The run row itself is created and finalised like the pipeline's so it does not linger as ``running``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import sqlalchemy as sa
from pgvector.sqlalchemy import Vector
from sqlalchemy.dialects.postgresql import DOUBLE_PRECISION
from sqlalchemy.orm import Session

from rag_pipeline.contracts.runs import RunCounts
from rag_pipeline.evaluation.datasets.load import Dataset, EvaluationCase
from rag_pipeline.evaluation.metrics import METRIC_NAMES, evaluate_retrieval
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.evaluation.runs import results as persistence
from rag_pipeline.knowledge_base import textsearch
from rag_pipeline.knowledge_base.embedding import get_embedder
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.retrieval import sql as retrieval_sql
from rag_pipeline.retrieval.search import LegHit, fuse_pool
from rag_pipeline.retrieval.strategies import Strategy
from rag_pipeline.retrieval.strategy_store import register_strategy
from rag_pipeline.storage.evaluation_tables import RetrievalEvaluationCandidate, RetrievalEvaluationCaseResult
from rag_pipeline.storage.tables import (
    ChunkEmbedding,
    Document,
    DocumentChunk,
    DocumentPublicationStatus,
    DocumentStatus,
)


@dataclass
class BaselineResult:
    run_id: str
    case_count: int = 0
    candidate_count: int = 0
    wall_s: float = 0.0
    timings: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("embedding_s", "sql_s", "fusion_metrics_s", "persistence_s"), 0.0))
    averages: dict[str, float] = field(default_factory=dict)


def run_seed_baseline(engine: sa.Engine, dataset: Dataset, strategy: Strategy,
                      cases: Sequence[EvaluationCase] | None = None) -> BaselineResult:
    """Evaluate ``cases`` (default: all of ``dataset``) the seed's way; returns timings and the run id."""
    cases = list(dataset.cases if cases is None else cases)
    embedder = get_embedder(strategy.embedding_model)
    with engine.begin() as conn:
        kb = resolve_knowledge_base(conn, dataset.knowledge_base)
        params_hash = register_strategy(conn, strategy)
        dataset_id = persistence.store_dataset(conn, dataset, kb.name)
        dimension = conn.execute(sa.text(retrieval_sql.MODEL_DIMENSION_SQL),
                                 {"model": strategy.embedding_model}).scalar_one()
    run_id = run_records.create_run(engine, dataset_id=dataset_id, knowledge_base_id=kb.id, strategy=strategy,
                             params_hash=params_hash, partition_key="bench:seed-baseline")
    result = BaselineResult(str(run_id))
    t = result.timings
    sums = dict.fromkeys(METRIC_NAMES, 0.0)
    cfg = textsearch.regconfig(kb.text_search)
    base_filters = (
        DocumentChunk.knowledge_base_id == kb.id,
        DocumentChunk.is_current.is_(True),
        Document.status == DocumentStatus.READY,
        Document.publication_status == DocumentPublicationStatus.PUBLISHED,
        Document.is_deleted.is_(False),
    )
    start = time.perf_counter()
    for index, case in enumerate(cases):
        with Session(engine) as session, session.begin():
            t0 = time.perf_counter()
            query_embedding = embedder.embed_one(case.question)
            t1 = time.perf_counter()
            vector_hits: list[LegHit] = []
            if strategy.vector_candidate_k:
                session.execute(sa.text(retrieval_sql.VECTOR_SETTINGS_SQL), {"ef_search": strategy.ef_search})
                distance = sa.cast(ChunkEmbedding.embedding, Vector(dimension)).cosine_distance(query_embedding)
                vector_rows = session.execute(
                    sa.select(DocumentChunk, Document.original_name, distance.label("distance"))
                    .join(Document, Document.id == DocumentChunk.document_id)
                    .join(ChunkEmbedding, ChunkEmbedding.chunk_id == DocumentChunk.id)
                    .where(*base_filters, ChunkEmbedding.model == strategy.embedding_model,
                           ChunkEmbedding.knowledge_base_id == kb.id)
                    .order_by(distance)
                    .limit(strategy.vector_candidate_k)
                ).all()
                vector_hits = [LegHit(str(chunk.id), str(chunk.document_id), name, 1 - dist)
                               for chunk, name, dist in vector_rows]
            keyword_hits: list[LegHit] = []
            if strategy.keyword_candidate_k:
                ts_query = sa.text(textsearch.OR_TSQUERY_SQL).bindparams(
                    cfg=cfg, qtext=textsearch.prepare(kb.text_search, case.question))
                rank = sa.cast(sa.func.ts_rank_cd(DocumentChunk.content_tsvector, ts_query, 32), DOUBLE_PRECISION)
                keyword_rows = session.execute(
                    sa.select(DocumentChunk, Document.original_name, rank.label("rank"))
                    .join(Document, Document.id == DocumentChunk.document_id)
                    .where(*base_filters, DocumentChunk.content_tsvector.op("@@")(ts_query))
                    .order_by(rank.desc(), DocumentChunk.id)
                    .limit(strategy.keyword_candidate_k)
                ).all()
                keyword_hits = [LegHit(str(chunk.id), str(chunk.document_id), name, float(score))
                                for chunk, name, score in keyword_rows]
            t2 = time.perf_counter()
            for leg in (vector_hits, keyword_hits):
                leg.sort(key=lambda h: (-h.score, h.chunk_id))
            trace = fuse_pool(case.question, vector_hits, keyword_hits, strategy, case.k)
            relevant_ids = set(case.relevant_chunk_ids)
            metrics = evaluate_retrieval([c.chunk_id for c in trace.selected], relevant_ids, case.k).model_dump()
            for name in METRIC_NAMES:
                sums[name] += metrics[name]
            t3 = time.perf_counter()
            # the case's result row first: the candidate view takes each candidate's case_index from it
            session.add(RetrievalEvaluationCaseResult(
                evaluation_run_id=run_id, case_id=case.case_id, case_index=index, question=case.question, k=case.k,
                relevant_chunk_ids=list(case.relevant_chunk_ids),
                retrieved_chunk_ids=[c.chunk_id for c in trace.selected], **{m: metrics[m] for m in METRIC_NAMES}))
            session.flush()
            # 全量候选落库 (docs/design.md §4.2): one ORM object per candidate of the full pool
            for chunk in trace.candidates:
                session.add(RetrievalEvaluationCandidate(
                    evaluation_run_id=run_id,
                    case_id=case.case_id,
                    chunk_id=chunk.chunk_id,
                    document_id=chunk.document_id,
                    document_name=chunk.document_name,
                    rank=chunk.rank,
                    vector_score=chunk.vector_score,
                    vector_rank=chunk.vector_rank,
                    keyword_score=chunk.keyword_score,
                    keyword_rank=chunk.keyword_rank,
                    rerank_score=chunk.rerank_score,
                    final_score=chunk.final_score,
                    is_relevant=chunk.chunk_id in relevant_ids,
                    is_selected=chunk.rank <= len(trace.selected),
                    strategy_version=chunk.strategy_version,
                ))
            result.candidate_count += len(trace.candidates)
        t4 = time.perf_counter()  # the commit of the case's transaction is persistence
        t["embedding_s"] += t1 - t0
        t["sql_s"] += t2 - t1
        t["fusion_metrics_s"] += t3 - t2
        t["persistence_s"] += t4 - t3
        result.case_count += 1
    result.wall_s = time.perf_counter() - start
    result.averages = {m: sums[m] / max(len(cases), 1) for m in METRIC_NAMES}
    with engine.begin() as conn:
        persistence.finalize_run(conn, run_id, dataset_name=dataset.name + " (seed baseline)",
                                 knowledge_base_name=kb.name, strategy_version=strategy.version,
                                 case_count=result.case_count, candidate_count=result.candidate_count,
                                 averages=result.averages, timings={k: round(v, 4) for k, v in t.items()},
                                 summary=RunCounts())
    return result
