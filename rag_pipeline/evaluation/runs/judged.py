"""Judged@k and the judged share of the pool (docs/metrics.md), per case and per run, from a run's stored pools:
a chunk is judged when the case's labels grade it (0 included); an unjudged one scores as not relevant."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import sqlalchemy as sa

from rag_pipeline.contracts.metrics import Judged, JudgedSummary
from rag_pipeline.evaluation.datasets.load import EvaluationCase
from rag_pipeline.evaluation.runs.case_queries import judged_counts
from rag_pipeline.retrieval.trace import RetrievalTrace

NOTHING_RETRIEVED = "nothing retrieved: Judged@k is undefined (no ranking to judge)"
EMPTY_POOL = "empty pool: no candidate to judge"


def case_judged(row) -> Judged:
    """The :class:`Judged` of one :func:`judged_counts` row."""
    reason = NOTHING_RETRIEVED if not row.top else None
    return Judged(at_k=row.judged_top / row.top if row.top else None, unjudged_at_k=row.top - row.judged_top,
                  pool=row.judged_pool / row.pool if row.pool else None, pool_size=row.pool,
                  reason=reason or (EMPTY_POOL if not row.pool else None))


def summarize(per_case: Sequence[Judged]) -> JudgedSummary:
    """The run's :class:`JudgedSummary` of its cases' values."""
    at_k = [j.at_k for j in per_case if j.at_k is not None]
    pool = [j.pool for j in per_case if j.pool is not None]
    return JudgedSummary(at_k=sum(at_k) / len(at_k) if at_k else None, pool=sum(pool) / len(pool) if pool else None,
                         unjudged_at_k=sum(j.unjudged_at_k for j in per_case), cases=len(at_k),
                         undefined=len(per_case) - len(at_k))


class JudgedCounts(NamedTuple):
    """The counts :func:`case_judged` reads (those of :func:`judged_counts`' rows)."""

    top: int
    judged_top: int
    pool: int
    judged_pool: int


def judged_of_traces(cases: Sequence[EvaluationCase], traces: Sequence[RetrievalTrace]) -> list[Judged]:
    """The :class:`Judged` of each answerable case of a batch from its pool as the run stores it (a candidate is
    judged when the case grades it, the stored ``relevance_grade``): the values :func:`judged_of_cases` reads back
    from the stored rows, counted while the run writes them."""
    out = []
    for case, trace in zip(cases, traces, strict=True):
        if not case.answerable:
            continue
        grades, k = case.grades, case.k
        judged = [c.chunk_id in grades for c in trace.candidates]
        top = [c.rank <= k for c in trace.candidates]
        out.append(case_judged(JudgedCounts(sum(top), sum(t and j for t, j in zip(top, judged, strict=True)),
                                            len(judged), sum(judged))))
    return out


def judged_of_cases(conn: sa.Connection, run_id, case_ids: Sequence[str] | None = None) -> dict[str, Judged]:
    """Case id → :class:`Judged` of the answerable cases of a run (``case_ids``: only those)."""
    return {row.case_id: case_judged(row) for row in judged_counts(conn, run_id, case_ids)}


def judged_of_run(conn: sa.Connection, run_id) -> JudgedSummary:
    return summarize(list(judged_of_cases(conn, run_id).values()))
