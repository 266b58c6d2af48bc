"""Import a TREC run file as a stored run of a named external strategy against a stored dataset, through the same
writes as a built-in strategy's run (:mod:`rag_pipeline.evaluation.runs.results`), in one transaction: a bad line
(or any failure) leaves nothing stored. The file is streamed into a temporary table, never held in memory."""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import sqlalchemy as sa

from rag_pipeline.contracts.runs import RunCounts
from rag_pipeline.contracts.trec import TrecRunImport
from rag_pipeline.evaluation.datasets.load import EvaluationCase
from rag_pipeline.evaluation.datasets.resolve import DatasetRef
from rag_pipeline.evaluation.datasets.strict_json import DatasetError, DatasetProblem
from rag_pipeline.evaluation.diagnosis import miss_reasons as diagnosis
from rag_pipeline.evaluation.metrics import METRIC_NAMES, evaluate_many
from rag_pipeline.evaluation.queries import trec as queries
from rag_pipeline.evaluation.runs import lifecycle, results
from rag_pipeline.evaluation.runs import queries as run_queries
from rag_pipeline.evaluation.trec.lines import TrecFileError, chunk_uuid, read_run
from rag_pipeline.knowledge_base.versions import content_version
from rag_pipeline.retrieval import sql as retrieval_sql
from rag_pipeline.retrieval.strategy_store import StrategyConflictError
from rag_pipeline.retrieval.trace import Candidate, RetrievalTrace
from rag_pipeline.storage.names import STRATEGY_VERSION, InvalidNameError, check_name, name_rule, show_name

BATCH_SIZE = 64
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
    counts = {"lines": 0, "stored": 0, "external": 0}

    def staged() -> Iterator[tuple]:
        for row in read_run(path):
            chunk, derived = chunk_uuid(kb.name, row.docno)
            case = index.get(row.qid)
            counts["lines"] += 1
            counts["stored"] += case is not None
            counts["external"] += derived
            yield row.line, row.qid, case, row.docno, chunk, row.score

    with engine.begin() as conn:
        queries.create_staging(conn)
        queries.copy_staging(conn, staged())
        duplicate = queries.first_duplicate(conn)
        if duplicate is not None:
            raise TrecFileError(path, duplicate.second, "docno", f"topic {duplicate.qid} ranks document "
                                f"{duplicate.docno} twice (first at line {duplicate.first}): trec_eval would count "
                                "it twice")
        queries.index_staging(conn)
        unknown = queries.unknown_topics(conn)
        params_hash = _register(conn, strategy)
        dataset_id = results.store_dataset(conn, dataset, kb.name)
        run_id = lifecycle.create_run(conn, dataset_id=dataset_id, knowledge_base_id=kb.id, strategy=strategy,
                                      params_hash=params_hash)
        run_queries.create_candidate_partition(conn, run_id)
        run_queries.set_knowledge_base_version(conn, run_id, content_version(conn, kb.id).version)
        queries.remember_staged_ids(conn, kb.id)
        stats = RunCounts(batch_size=BATCH_SIZE)
        sums, tally, candidates, empty = np.zeros(len(METRIC_NAMES)), Counter[str](), 0, 0
        for start in range(0, len(dataset.cases), BATCH_SIZE):
            batch = dataset.cases[start:start + BATCH_SIZE]
            traces = _traces(conn, strategy.version, start, batch)
            empty += sum(not t.candidates for t in traces)
            values = _metrics(batch, traces)
            sums += values.sum(axis=0)
            reasons = [diagnosis.classify_misses(c, t.candidates, legs=()) for c, t in zip(batch, traces,
                                                                                         strict=True)]
            tally.update(m.reason for case in reasons for m in case)
            candidates += results.copy_candidates(conn, results.candidate_rows(run_id, start, batch, traces))
            results.copy_case_results(conn, results.case_rows(run_id, start, batch, traces, values, reasons, stats))
        averages = {m: float(v) for m, v in zip(METRIC_NAMES, sums / sum(c.answerable for c in dataset.cases),
                                                   strict=True)}
        stats.miss_reasons = diagnosis.summarize_counts(tally)
        stats.first_line = diagnosis.first_line(stats.miss_reasons, averages)
        results.finalize_run(conn, run_id, dataset_name=dataset.name, knowledge_base_name=kb.name,
                             strategy_version=strategy.version, case_count=len(dataset.cases),
                             candidate_count=candidates, averages=averages,
                             timings={"total_s": round(time.perf_counter() - t0, 4)}, summary=stats)
    return TrecRunImport(
        run_id=str(run_id), strategy_version=strategy.version, dataset=dataset.name,
        dataset_version=dataset.content_hash, knowledge_base=kb.name, lines=counts["lines"],
        lines_stored=counts["stored"], cases=len(dataset.cases), cases_without_lines=empty,
        unknown_topics=unknown.topics, unknown_topic_lines=unknown.lines,
        unknown_topic_examples=list(unknown.examples or []), external_ids=counts["external"] > 0, metrics=averages)


def _traces(conn: sa.Connection, version: str, start: int, batch: Sequence[EvaluationCase]) -> list[RetrievalTrace]:
    """Each case's whole ranked list (its candidate pool); the first ``k`` are its selected chunks."""
    pools: list[list[Candidate]] = [[] for _ in batch]
    for row in queries.ranked(conn, start, start + len(batch) - 1):
        pool = pools[row.case_index - start]
        pool.append(Candidate(str(row.chunk_id), "", "", len(pool) + 1, None, None, None, None, None,
                              float(row.score), version))
    return [RetrievalTrace(case.question, pool, pool[:case.k]) for case, pool in zip(batch, pools, strict=True)]


def _metrics(batch: Sequence[EvaluationCase], traces: Sequence[RetrievalTrace]) -> np.ndarray:
    """As a built-in run's: one row per case, an unanswerable case's row 0 (a placeholder read as NULL)."""
    values = np.zeros((len(batch), len(METRIC_NAMES)))
    scored = [i for i, c in enumerate(batch) if c.answerable]
    if scored:
        result = evaluate_many([[c.chunk_id for c in traces[i].candidates] for i in scored],
                               [batch[i].relevance for i in scored], [batch[i].k for i in scored])
        values[scored] = np.column_stack([result[m] for m in METRIC_NAMES])
    return values
