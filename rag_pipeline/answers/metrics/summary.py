"""An answer run's figures from its per-case results (docs/design.md §12.4): each mean over the cases the metric
is defined for, the others counted in ``n_skipped`` by reason (a metric defined for no case has mean ``None``)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from rag_pipeline.answers.metrics.official import official_scores
from rag_pipeline.contracts.answers import (
    ANSWER_METRIC_NAMES,
    VERDICTS,
    AnswerCaseResult,
    AnswerMetricSummary,
    AnswerSummary,
)

MAX_MISSING_IDS = 100
NO_ANSWER = "no answer"


def metric_summary(values: Sequence[float | None], reasons: Sequence[str | None]) -> AnswerMetricSummary:
    """Mean of the defined values, ``n_scored`` / ``n_skipped`` and the skip reasons' counts."""
    scored = [float(v) for v in values if v is not None]
    if any(not math.isfinite(v) for v in scored):
        raise ValueError("a metric value is not a finite number")
    skips = Counter(r or "undefined" for v, r in zip(values, reasons, strict=True) if v is None)
    return AnswerMetricSummary(mean=sum(scored) / len(scored) if scored else None, n_scored=len(scored),
                               n_skipped=len(values) - len(scored), skip_reasons=dict(sorted(skips.items())))


def _refusal_share(results: Sequence[AnswerCaseResult], answerable: bool) -> AnswerMetricSummary:
    group = [r for r in results if r.answerable is answerable]
    return metric_summary([(1.0 if r.refused else 0.0) if r.status == "ok" else None for r in group],
                          [None if r.status == "ok" else NO_ANSWER for r in group])


def _percentiles(latencies: list[float]) -> tuple[float, float]:
    import numpy as np  # noqa: PLC0415 - only for answers that carry latencies (an official prediction file has none)

    p50, p95 = (float(x) for x in np.percentile(latencies, [50, 95]))
    return p50, p95


def summarise(results: Sequence[AnswerCaseResult], *, cases: int, convention: str | None = None) -> AnswerSummary:
    """The run's :class:`AnswerSummary` over ``cases`` dataset cases (docs/design.md §12.4); with ``convention``
    squad or cmrc, the official script's figures too."""
    if cases < len(results) or cases < 1:
        raise ValueError(f"cases must be at least 1 and at least the {len(results)} results, got {cases}")
    answered = [r for r in results if r.status == "ok"]
    metrics = {name: metric_summary([getattr(r.answer_metrics, name) for r in results],
                                    [r.skipped.get(name) for r in results]) for name in ANSWER_METRIC_NAMES}
    verdicts = dict.fromkeys(VERDICTS, 0)
    verdicts.update(Counter(r.verdict for r in results))
    latencies = [r.latency_ms for r in answered if r.latency_ms is not None]
    p50, p95 = _percentiles(latencies) if latencies else (None, None)
    answerable = sum(r.answerable for r in results)
    return AnswerSummary(
        cases=cases, answered=len(answered),
        missing_case_ids=[r.case_id for r in results if r.status != "ok"][:MAX_MISSING_IDS],
        missing=cases - len(answered), errors=sum(r.status == "error" for r in results),
        coverage=len(answered) / cases, answerable_cases=answerable, unanswerable_cases=len(results) - answerable,
        metrics=metrics, refusal_recall=_refusal_share(results, False),
        false_refusal_rate=_refusal_share(results, True), verdicts=verdicts, latency_ms_p50=p50,
        latency_ms_p95=p95, convention=convention, official=official_scores(results, convention))
