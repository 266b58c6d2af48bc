"""Writing evaluation results (dataset versions, candidate pools and case results by COPY, run summary) in one
transaction that :func:`finalize_run` ends: nothing remains of a run that fails."""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np
import sqlalchemy as sa

from rag_pipeline.contracts.metrics import METRIC_NAMES, JudgedSummary
from rag_pipeline.contracts.reports import MissReason
from rag_pipeline.contracts.runs import RunCounts, StageTimes
from rag_pipeline.evaluation.datasets import queries as dataset_queries
from rag_pipeline.evaluation.datasets.load import Dataset, EvaluationCase
from rag_pipeline.evaluation.diagnosis.miss_reasons import REASONS_JSON
from rag_pipeline.evaluation.runs import queries as run_queries
from rag_pipeline.evaluation.runs.case_queries import copy_binary, copy_rows
from rag_pipeline.evaluation.runs.judged import judged_of_run
from rag_pipeline.retrieval.trace import RetrievalTrace

CANDIDATE_COLUMNS = (
    "evaluation_run_id", "case_index", "chunk_id", "rank", "vector_score", "vector_rank", "keyword_score",
    "keyword_rank", "rerank_score", "final_score", "is_selected", "relevance_grade")
"""The stored columns of a candidate (docs/design.md §4.2); the view adds the rest of §4.1."""
CASE_RESULT_COLUMNS = (
    "evaluation_run_id", "case_id", "case_index", "question", "k", "relevant_chunk_ids",
    "retrieved_chunk_ids", "first_relevant_rank", *METRIC_NAMES, "miss_reasons", "relevance_grades")
HTTP_CASE_RESULT_COLUMNS = (*CASE_RESULT_COLUMNS, "latency_ms", "retrieval_error")
"""An ``http`` strategy's case rows: its reply time and why it gave no ranking (null: it did)."""


def store_dataset(conn: sa.Connection, dataset: Dataset, knowledge_base_name: str) -> object:
    """The id of this dataset version (name, knowledge base, content hash), inserted on first sight; storing the same
    version again moves its ``last_seen_at`` to now() (the latest version of a dataset is the one seen last)."""
    stored = dataset_queries.touch_version(conn, name=dataset.name, knowledge_base=knowledge_base_name,
                                           content_hash=dataset.content_hash)
    if stored is not None:  # every run of a click stores the same version: its cases are sent once
        return stored
    return dataset_queries.upsert_version(conn, name=dataset.name, knowledge_base=knowledge_base_name,
                                          content_hash=dataset.content_hash, source_path=dataset.source_path,
                                          cases=[c.as_dict() for c in dataset.cases])


def load_stored_dataset(conn: sa.Connection, dataset_id) -> Dataset:
    """A stored dataset version as a :class:`Dataset` (cases exactly as validated when it was stored)."""
    row = dataset_queries.version_by_id(conn, dataset_id)
    if row is None:
        raise LookupError(f"no stored dataset version {dataset_id}")
    cases = tuple(EvaluationCase.from_dict(c) for c in row.cases)
    return Dataset(row.name, row.knowledge_base_name, cases, row.content_hash, row.source_path)


CANDIDATE_TYPES = ("uuid", "int4", "uuid", "int4", "float8", "int2", "float8", "int4", "float8", "float8", "bool",
                   "int2")
"""The PostgreSQL types of :data:`CANDIDATE_COLUMNS`, as :func:`candidate_tuples` encodes them."""


def copy_candidates(conn: sa.Connection, block: tuple[bytes, int]) -> int:
    """:func:`candidate_tuples` into the run's partition by one binary COPY (docs/design.md §4.2)."""
    with candidate_copy(conn) as write:
        return write(block)


@contextmanager
def candidate_copy(conn: sa.Connection) -> Iterator[Callable[[tuple[bytes, int]], int]]:
    """One binary COPY of a run's pools, open while its batches come: ``with candidate_copy(conn) as write:``,
    ``write(candidate_tuples(...))`` per batch, which returns the rows written."""
    with copy_binary(conn, "retrieval_evaluation_candidate_rows", CANDIDATE_COLUMNS) as write_block:
        def write(block: tuple[bytes, int]) -> int:
            write_block(block[0])
            return block[1]

        yield write


def copy_case_results(conn: sa.Connection, rows: Iterable[Sequence],
                      columns: Sequence[str] = CASE_RESULT_COLUMNS) -> int:
    """Rows in ``columns`` order; the two id lists, the miss reasons and the grades as JSON text."""
    return copy_rows(conn, "retrieval_evaluation_case_results", columns, rows)


def finalize_run(conn: sa.Connection, run_id, *, dataset_name: str, knowledge_base_name: str,
                 strategy_version: str, case_count: int, candidate_count: int,
                 averages: Mapping[str, float], timings: Mapping[str, float], summary: RunCounts,
                 stages: Callable[[], StageTimes] | None = None, judged: JudgedSummary | None = None) -> None:
    """Write the summary (with the run's judged shares), mark the run ``succeeded`` and re-elect the current run of
    its dataset × knowledge base × strategy: the latest-started succeeded run on the dataset's latest version (a late
    finisher never wins). ``stages()``, called just before the summary is written: the run's stage times, stored
    in the summary as ``stages``. ``judged``: the run's judged shares counted as its pools were written (else they are
    read back from what this transaction wrote)."""
    key = f"rag-eval-current\x1f{dataset_name}\x1f{knowledge_base_name}\x1f{strategy_version}"
    # Serialise concurrent finishers of the same (dataset, KB, strategy) so exactly one run is current.
    run_queries.lock_current_slot(conn, key)
    # counted while writing, or read back from the pools and case results this transaction wrote
    summary.judged = judged if judged is not None else judged_of_run(conn, run_id)
    updated = run_queries.mark_succeeded(conn, run_id, averages=averages, case_count=case_count,
                                         candidate_count=candidate_count, timings=json.dumps(dict(timings)),
                                         summary=summary_json(summary, stages() if stages else None))
    if updated != 1:
        raise RuntimeError(f"evaluation run {run_id} is no longer 'running' (marked abandoned or failed "
                           "by another process); its results were not saved")
    run_queries.elect_current(conn, dataset_name=dataset_name, knowledge_base_name=knowledge_base_name,
                              strategy_version=strategy_version)


def summary_json(summary: RunCounts, stages: StageTimes | None) -> str:
    """The stored ``summary`` column: the run's counts, and its stage times under ``stages``."""
    if stages is None:
        return summary.model_dump_json()
    return json.dumps({**json.loads(summary.model_dump_json()), "stages": stages.model_dump(mode="json")})


_NULL = struct.pack(">i", -1)
_INT4 = struct.Struct(">ii").pack  # (length 4, value)
_INT2 = struct.Struct(">ih").pack
_FLOAT8 = struct.Struct(">id").pack
_BOOL = {True: struct.pack(">ib", 1, 1), False: struct.pack(">ib", 1, 0)}
_UUID_LENGTH = struct.pack(">i", 16)
_PACKED = 1024
_INT4S = [_INT4(4, n) for n in range(_PACKED)]  # the ranks' fields, packed once
_INT2S = [_INT2(2, n) for n in range(_PACKED)]


def candidate_tuples(run_id, offset: int, batch: Sequence[EvaluationCase], traces: Sequence[RetrievalTrace],
                     chunk_fields: dict[str, bytes] | None = None) -> tuple[bytes, int]:
    """:data:`CANDIDATE_COLUMNS` rows of a batch as binary COPY tuples (:data:`CANDIDATE_TYPES`), and how many;
    the view adds case_id, document, strategy, is_relevant. ``chunk_fields``: the chunk ids encoded already, kept
    across a run's batches (a chunk is in many pools)."""
    head = struct.pack(">h", len(CANDIDATE_COLUMNS)) + _UUID_LENGTH + uuid.UUID(str(run_id)).bytes
    encoded = {} if chunk_fields is None else chunk_fields
    int4s, int2s, selected, not_selected = _INT4S, _INT2S, _BOOL[True], _BOOL[False]
    parts: list[bytes] = []
    for i, (case, trace) in enumerate(zip(batch, traces, strict=True)):
        grades = case.grades  # judged grade of a chunk (0 = judged not relevant); not judged: NULL
        n_selected, index = len(trace.selected), _INT4(4, offset + i)
        for chunk_id, _, _, rank, vs, vr, ks, kr, rs, final, _, _, _ in trace.candidates:
            chunk = encoded.get(chunk_id)
            if chunk is None:
                chunk = encoded[chunk_id] = _UUID_LENGTH + uuid.UUID(chunk_id).bytes
            grade = grades.get(chunk_id)
            parts += (head, index, chunk, int4s[rank] if rank < _PACKED else _INT4(4, rank),
                      _NULL if vs is None else _FLOAT8(8, vs),
                      _NULL if vr is None else int2s[vr] if 0 <= vr < _PACKED else _INT2(2, vr),
                      _NULL if ks is None else _FLOAT8(8, ks),
                      _NULL if kr is None else int4s[kr] if 0 <= kr < _PACKED else _INT4(4, kr),
                      _NULL if rs is None else _FLOAT8(8, rs),
                      _FLOAT8(8, final), selected if rank <= n_selected else not_selected,
                      _NULL if grade is None else _INT2(2, grade))
    return b"".join(parts), len(parts) // 12


def case_rows(run_id, offset: int, batch: Sequence[EvaluationCase], traces: Sequence[RetrievalTrace],
              values: np.ndarray, reasons: Sequence[Sequence[MissReason]], stats: RunCounts):
    """:data:`CASE_RESULT_COLUMNS` rows, tallied in ``stats``; an unanswerable case is stored with
    ``relevant_chunk_ids`` ``[]`` and the placeholder metrics of :func:`unscored_metrics` (read as NULL)."""
    for i, (case, trace) in enumerate(zip(batch, traces, strict=True)):
        relevant = set(case.relevant_chunk_ids)
        ranks = [c.rank for c in trace.candidates if c.chunk_id in relevant]
        if not case.answerable:
            stats.unanswerable_cases += 1
        else:
            stats.relevant_total += len(relevant)
            stats.relevant_in_pool += len(ranks)
            stats.cases_without_candidates += not trace.candidates
            stats.cases_with_hit += any(c.chunk_id in relevant for c in trace.selected)
        yield (run_id, case.case_id, offset + i, case.question, case.k, json.dumps(list(case.relevant_chunk_ids)),
               json.dumps([c.chunk_id for c in trace.selected]), min(ranks) if ranks else None,
               *(float(v) for v in values[i]),
               REASONS_JSON.dump_json(list(reasons[i])).decode(), json.dumps(case.grades))
