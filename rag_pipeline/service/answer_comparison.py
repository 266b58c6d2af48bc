"""Comparing two stored answer runs case by case with the retrieval comparison's paired statistics."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import sqlalchemy as sa

from rag_pipeline.analysis.statistics import bootstrap_ci, paired_permutation_test
from rag_pipeline.answers.runs import persistence
from rag_pipeline.contracts.answers import (
    ANSWER_METRIC_NAMES,
    AnswerCaseResult,
    AnswerComparison,
    AnswerMetricComparison,
)

SEED = 0
N_RESAMPLES = 10_000


def compare_answer_runs(engine: sa.Engine, run_a: str, run_b: str) -> AnswerComparison:
    """Run B against run A (ids or unique prefixes), paired over their common cases."""
    with engine.connect() as conn:
        a, _ = persistence.load_run(conn, run_a)
        b, _ = persistence.load_run(conn, run_b)
        cases_a = {c.case_id: c for c in persistence.load_cases(conn, a.run_id)}
        cases_b = {c.case_id: c for c in persistence.load_cases(conn, b.run_id)}
    common = [cid for cid in cases_a if cid in cases_b]
    changes = Counter(f"{cases_a[c].verdict}->{cases_b[c].verdict}" for c in common
                      if cases_a[c].verdict != cases_b[c].verdict)
    return AnswerComparison(run_a=a, run_b=b, common_cases=len(common),
                            metrics=[_metric(m, [cases_a[c] for c in common], [cases_b[c] for c in common])
                                     for m in ANSWER_METRIC_NAMES],
                            verdict_changes=dict(sorted(changes.items())))


def _metric(metric: str, a: list[AnswerCaseResult], b: list[AnswerCaseResult]) -> AnswerMetricComparison:
    pairs = [(getattr(x.answer_metrics, metric), getattr(y.answer_metrics, metric)) for x, y in zip(a, b, strict=True)]
    pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
    if not pairs:
        return AnswerMetricComparison(metric=metric, n=0, mean_a=None, mean_b=None, delta=None, p_value=None)
    va = np.array([x for x, _ in pairs], dtype=float)
    vb = np.array([y for _, y in pairs], dtype=float)
    mean_a, mean_b = float(va.mean()), float(vb.mean())
    out = AnswerMetricComparison(metric=metric, n=len(pairs), mean_a=mean_a, mean_b=mean_b, delta=mean_b - mean_a,
                                 p_value=None)
    if len(pairs) >= 2:
        low, high = bootstrap_ci(vb - va, n_resamples=N_RESAMPLES, seed=SEED)
        p = paired_permutation_test(vb, va, n_resamples=N_RESAMPLES, seed=SEED)
        out.p_value = p if math.isfinite(p) else None
        out.ci_low, out.ci_high = (low, high) if math.isfinite(low) and math.isfinite(high) else (None, None)
    return out
