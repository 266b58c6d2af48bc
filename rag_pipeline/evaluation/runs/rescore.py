"""Re-score a stored run on new labels without retrieving (docs/labelling.md): its stored pools are copied into a
new run on the new dataset version, each candidate graded by the new labels, and every metric, miss reason and
judged share recomputed from them, in one transaction. Nothing is searched or embedded."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import sqlalchemy as sa

from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.contracts.runs import RunCounts
from rag_pipeline.evaluation.datasets.label_check import relevant_ids_missing
from rag_pipeline.evaluation.datasets.resolve import DatasetRef
from rag_pipeline.evaluation.diagnosis import miss_reasons as diagnosis
from rag_pipeline.evaluation.metrics import METRIC_NAMES
from rag_pipeline.evaluation.queries.trec import scored_candidates
from rag_pipeline.evaluation.runs import owner as run_owner
from rag_pipeline.evaluation.runs import queries as run_queries
from rag_pipeline.evaluation.runs import results
from rag_pipeline.evaluation.runs.candidate_queries import copy_pools
from rag_pipeline.evaluation.runs.case_queries import case_rows
from rag_pipeline.evaluation.runs.lifecycle import get_run
from rag_pipeline.evaluation.trec.run_import import pool_metrics
from rag_pipeline.retrieval.trace import Candidate, RetrievalTrace
from rag_pipeline.storage.ids import as_uuid
from rag_pipeline.storage.names import printable


class RescoreError(BadInputError, ValueError):
    """The run cannot be re-scored on that dataset version; the message says why and what to do instead."""


def _check(old: dict[str, sa.RowMapping], ref: DatasetRef, run_id: str) -> list[str]:
    """Problems that make a stored pool no answer to a case of the new version (a case the run never had, another
    question, another k); at most the first five, with the count."""
    problems = []
    for c in ref.dataset.cases:
        was = old.get(c.case_id)
        if was is None:
            problems.append(f"case {printable(c.case_id)} is not a case of run {run_id[:8]} (no stored pool)")
        elif was["question"] != c.question:
            problems.append(f"case {printable(c.case_id)} asks another question than in run {run_id[:8]}")
        elif was["k"] != c.k:
            problems.append(f"case {printable(c.case_id)} has k={c.k}, the run retrieved for k={was['k']}")
    return problems[:5] + ([f"... {len(problems) - 5} more"] if len(problems) > 5 else [])


def rescore_run(engine: sa.Engine, run_id: str, ref: DatasetRef) -> tuple[str, list[str]]:
    """Store a new run: run ``run_id``'s stored pools scored on the labels of dataset ``ref``, whose every case must
    be a case of the run with the same question and k. Returns the new run's id and the run's case ids that the
    dataset no longer has (left out). The new run is elected current as an evaluated one would be."""
    t0 = time.perf_counter()
    dataset, kb = ref.dataset, ref.kb
    with engine.begin() as conn:
        source = get_run(conn, run_id)
        run_id = str(source.id)
        if source.status != "succeeded":
            raise RescoreError(f"run {run_id[:8]} is {source.status}: only a succeeded run has pools to re-score")
        if str(source.knowledge_base_id) != str(kb.id):
            raise RescoreError(f"run {run_id[:8]} searched knowledge base {source.knowledge_base_name!r}, the dataset "
                               f"belongs to {kb.name!r}: its pools hold no chunk of that one")
        if not any(c.answerable for c in dataset.cases):
            raise RescoreError(f"every case of dataset {dataset.name!r} is unanswerable: no metric to re-score")
        old = {r["case_id"]: r for r in case_rows(conn, run_id)}
        if problems := _check(old, ref, run_id):
            raise RescoreError(f"dataset {dataset.name!r} (version {dataset.content_hash[:12]}) cannot re-score run "
                               f"{run_id[:8]} without retrieving: " + "; ".join(problems)
                               + " — evaluate the strategy on it instead (`rag-pipeline evaluate`)")
        dataset_id = results.store_dataset(conn, dataset, kb.name)
        new_id = uuid.uuid4()
        run_queries.insert_rescored(conn, new_id, run_id, dataset_id, run_owner.this_process())
        run_queries.create_candidate_partition(conn, new_id)
        grades = [(i, chunk, grade) for i, c in enumerate(dataset.cases) for chunk, grade in c.grades.items()
                  if as_uuid(chunk) is not None]  # a label that is no UUID matches no candidate
        candidates = copy_pools(conn, new_id, run_id, [c.case_id for c in dataset.cases], grades)
        depths = [max(c.k, len(c.relevant_chunk_ids)) for c in dataset.cases]
        pools: list[list[Candidate]] = [[] for _ in dataset.cases]
        for row in scored_candidates(conn, new_id, depths):
            pools[row.case_index].append(Candidate(row.chunk_id, "", "", row.rank, None, None, None, None, None,
                                                   row.final_score, source.strategy_version))
        traces = [RetrievalTrace(c.question, pool, pool[:c.k]) for c, pool in zip(dataset.cases, pools, strict=True)]
        values = pool_metrics(dataset.cases, traces, depths)
        reasons = [diagnosis.classify_misses(c, t.candidates, legs=()) for c, t in zip(dataset.cases, traces,
                                                                                       strict=True)]
        stats = RunCounts(relevant_ids_not_in_kb=relevant_ids_missing(conn, kb.id, dataset), rescored_from=run_id)
        results.copy_case_results(conn, results.case_rows(new_id, 0, dataset.cases, traces, values, reasons, stats))
        scored = sum(c.answerable for c in dataset.cases)
        averages = {m: float(v) for m, v in zip(METRIC_NAMES, values.sum(axis=0) / scored, strict=True)}
        stats.miss_reasons = diagnosis.summarize_counts(Counter(m.reason for case in reasons for m in case))
        stats.first_line = diagnosis.first_line(stats.miss_reasons, averages)
        results.finalize_run(conn, new_id, dataset_name=dataset.name, knowledge_base_name=kb.name,
                             strategy_version=source.strategy_version, case_count=len(dataset.cases),
                             candidate_count=candidates, averages=averages,
                             timings={"rescore_s": round(time.perf_counter() - t0, 4),
                                      "total_s": round(time.perf_counter() - t0, 4)}, summary=stats)
    kept = {c.case_id for c in dataset.cases}
    return str(new_id), [c for c in old if c not in kept]
