"""Import a TREC run file as a stored run of a named external strategy against a stored dataset, in one
transaction: a bad line (or any failure) leaves nothing stored. The file is streamed into a temporary table, never
held in memory; PostgreSQL ranks it into the run's candidate partition, and the run row, the case results (COPY)
and the summary are written as a built-in strategy's are (:mod:`rag_pipeline.evaluation.runs`)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import sqlalchemy as sa

from rag_pipeline.contracts.runs import RunCounts
from rag_pipeline.contracts.trec import TrecRunImport
from rag_pipeline.evaluation.datasets.label_check import relevant_ids_missing
from rag_pipeline.evaluation.datasets.load import EvaluationCase
from rag_pipeline.evaluation.datasets.resolve import DatasetRef
from rag_pipeline.evaluation.datasets.strict_json import DatasetError, DatasetProblem
from rag_pipeline.evaluation.diagnosis import miss_reasons as diagnosis
from rag_pipeline.evaluation.metrics import METRIC_NAMES, evaluate_many
from rag_pipeline.evaluation.queries import trec as queries
from rag_pipeline.evaluation.runs import lifecycle, results
from rag_pipeline.evaluation.runs import queries as run_queries
from rag_pipeline.evaluation.trec.lines import TrecFileError, chunk_key, key_prefix, read_run
from rag_pipeline.knowledge_base.versions import content_version
from rag_pipeline.retrieval import sql as retrieval_sql
from rag_pipeline.retrieval.strategy_store import StrategyConflictError
from rag_pipeline.retrieval.trace import Candidate, RetrievalTrace
from rag_pipeline.storage.ids import as_uuid
from rag_pipeline.storage.names import STRATEGY_VERSION, InvalidNameError, check_name, name_rule, show_name

SOURCE = "trec_run"


@dataclass(frozen=True)
class ExternalStrategy:
    """A strategy whose ranking comes from outside (a TREC run file): a name and no leg of ours. Its stored
    parameters name the source and enable no leg (``vector_candidate_k`` = ``keyword_candidate_k`` = 0), so no
    reader mistakes it for a built-in strategy."""

    version: str
    embedding_model: str | None = None
    vector_candidate_k: int = 0

    def params(self) -> dict[str, object]:
        return {"external": SOURCE, "keyword_candidate_k": 0, "vector_candidate_k": 0}

    def params_hash(self) -> str:
        canonical = json.dumps(self.params(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def external_strategy(version: str) -> ExternalStrategy:
    try:
        return ExternalStrategy(check_name(STRATEGY_VERSION, version))
    except InvalidNameError as exc:
        raise TrecFileError("--strategy", None, None, f"{show_name(version)} is not a valid strategy name: "
                            f"{exc.reason}; {name_rule(STRATEGY_VERSION)}") from None


def _register(conn: sa.Connection, strategy: ExternalStrategy) -> str:
    params_hash = strategy.params_hash()
    stored = retrieval_sql.record_strategy(conn, strategy.version, params_hash, json.dumps(strategy.params()))
    if stored.params_hash != params_hash:
        raise StrategyConflictError(f"strategy {strategy.version} is a strategy of the project's own (its stored "
                                    "parameters differ from an imported run's): name the imported one otherwise")
    return params_hash


def import_run(engine: sa.Engine, path, strategy_version: str, ref: DatasetRef) -> TrecRunImport:
    """Store the run file ``path`` as a run of ``strategy_version`` on the dataset ``ref``; returns what it stored
    and counted. trec_eval's semantics: ranked by score descending, ties by docno descending, the rank ignored."""
    t0 = time.perf_counter()
    strategy = external_strategy(strategy_version)
    dataset, kb = ref.dataset, ref.kb
    if not any(c.answerable for c in dataset.cases):
        raise DatasetError(dataset.source_path or dataset.name, [DatasetProblem(
            "every case is unanswerable (\"answerable\": false): no retrieval metric is defined", field="cases")])
    index = {c.case_id: i for i, c in enumerate(dataset.cases)}
    prefix = key_prefix(kb.name)
    counts = {"lines": 0, "stored": 0, "external": 0, "unknown_lines": 0}
    unknown: set[str] = set()
    topics = _Topics(path)

    def staged() -> Iterator[tuple]:
        for line, qid, docno, score in read_run(path):
            chunk, derived = chunk_key(prefix, docno)
            case = index.get(qid)
            topics.check(line, qid, docno)
            counts["lines"] += 1
            counts["stored"] += case is not None
            counts["external"] += derived
            if case is None:
                counts["unknown_lines"] += 1
                unknown.add(qid)
            yield line, qid, case, docno, chunk, score

    timings: dict[str, float] = {}
    with engine.begin() as conn:
        queries.create_staging(conn)
        queries.copy_staging(conn, staged())
        t = _tick(timings, "read_copy_s", t0)
        duplicate = queries.first_duplicate(conn) if topics.regrouped else None
        if duplicate is not None:
            raise TrecFileError(path, duplicate.second, "docno", f"topic {duplicate.qid} ranks document "
                                f"{duplicate.docno} twice (first at line {duplicate.first}): trec_eval would count "
                                "it twice")
        t = _tick(timings, "checks_s", t)
        params_hash = _register(conn, strategy)
        dataset_id = results.store_dataset(conn, dataset, kb.name)
        run_id = lifecycle.create_run(conn, dataset_id=dataset_id, knowledge_base_id=kb.id, strategy=strategy,
                                      params_hash=params_hash)
        run_queries.create_candidate_partition(conn, run_id)
        run_queries.set_knowledge_base_version(conn, run_id, content_version(conn, kb.id).version)
        queries.remember_staged_ids(conn, kb.id)
        grades = [(i, chunk, grade) for i, c in enumerate(dataset.cases) for chunk, grade in c.grades.items()
                  if as_uuid(chunk) is not None]  # a label that is no UUID matches no candidate
        candidates = queries.store_candidates(conn, run_id, [c.k for c in dataset.cases], grades)
        t = _tick(timings, "rank_store_s", t)
        depths = [max(c.k, len(c.relevant_chunk_ids)) for c in dataset.cases]
        pools: list[list[Candidate]] = [[] for _ in dataset.cases]
        for row in queries.scored_candidates(conn, run_id, depths):
            pools[row.case_index].append(Candidate(row.chunk_id, "", "", row.rank, None, None, None, None, None,
                                                   row.final_score, strategy.version))
        stats = RunCounts(relevant_ids_not_in_kb=relevant_ids_missing(conn, kb.id, dataset))
        traces = [RetrievalTrace(c.question, pool, pool[:c.k]) for c, pool in zip(dataset.cases, pools, strict=True)]
        values = pool_metrics(dataset.cases, traces, depths)
        reasons = [diagnosis.classify_misses(c, t.candidates, legs=()) for c, t in zip(dataset.cases, traces,
                                                                                       strict=True)]
        results.copy_case_results(conn, results.case_rows(run_id, 0, dataset.cases, traces, values, reasons, stats))
        averages = {m: float(v) for m, v in zip(METRIC_NAMES, values.sum(axis=0) / sum(c.answerable for c in
                                                                                       dataset.cases), strict=True)}
        stats.miss_reasons = diagnosis.summarize_counts(Counter(m.reason for case in reasons for m in case))
        stats.first_line = diagnosis.first_line(stats.miss_reasons, averages)
        _tick(timings, "metrics_s", t)
        timings["total_s"] = time.perf_counter() - t0
        results.finalize_run(conn, run_id, dataset_name=dataset.name, knowledge_base_name=kb.name,
                             strategy_version=strategy.version, case_count=len(dataset.cases),
                             candidate_count=candidates, averages=averages,
                             timings={k: round(v, 4) for k, v in timings.items()}, summary=stats)
        empty = sum(not pool for pool in pools)
    return TrecRunImport(
        run_id=str(run_id), strategy_version=strategy.version, dataset=dataset.name,
        dataset_version=dataset.content_hash, knowledge_base=kb.name, lines=counts["lines"],
        lines_stored=counts["stored"], cases=len(dataset.cases), cases_without_lines=empty,
        unknown_topics=len(unknown), unknown_topic_lines=counts["unknown_lines"],
        unknown_topic_examples=sorted(unknown)[:5], external_ids=counts["external"] > 0, metrics=averages,
        timings={k: round(v, 4) for k, v in timings.items()})


class _Topics:
    """The duplicate check of a file whose lines come topic by topic (the usual layout), as it streams: one topic's
    docnos held at a time. A topic seen again after another (``regrouped``) leaves the check to the database."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path, self.regrouped = path, False
        self.current: str | None = None
        self.seen: dict[str, int] = {}
        self.finished: set[str] = set()

    def check(self, line: int, qid: str, docno: str) -> None:
        if qid != self.current:
            if self.current is not None:
                self.finished.add(self.current)
            self.regrouped = self.regrouped or qid in self.finished
            self.current, self.seen = qid, {}
        if self.regrouped:
            return
        first = self.seen.setdefault(docno, line)
        if first != line:
            raise TrecFileError(self.path, line, "docno", f"topic {qid} ranks document {docno} twice (first at line "
                                f"{first}): trec_eval would count it twice")


def _tick(timings: dict[str, float], key: str, since: float) -> float:
    now = time.perf_counter()
    timings[key] = now - since
    return now


def pool_metrics(cases: Sequence[EvaluationCase], traces: Sequence[RetrievalTrace],
                 depths: Sequence[int]) -> np.ndarray:
    """As a built-in run's: one row per case (an unanswerable case's row 0, a placeholder read as NULL), from each
    case's first ``max(k, relevant count)`` candidates, all that P/R/nDCG/AP/MRR at k and R-precision read."""
    values = np.zeros((len(cases), len(METRIC_NAMES)))
    scored = [i for i, c in enumerate(cases) if c.answerable]
    if scored:
        result = evaluate_many([[c.chunk_id for c in traces[i].candidates[:depths[i]]] for i in scored],
                               [cases[i].relevance for i in scored], [cases[i].k for i in scored])
        values[scored] = np.column_stack([result[m] for m in METRIC_NAMES])
    return values
