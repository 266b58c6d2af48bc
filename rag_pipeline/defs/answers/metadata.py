"""What the answer assets show in the Dagster UI (docs/design.md §7.3); pure functions."""

import dagster as dg

from rag_pipeline.contracts.answers import (
    ANSWER_METRIC_LABELS,
    ANSWER_METRIC_NAMES,
    VERDICTS,
    AnswerComparison,
    AnswerMetricSummary,
    AnswerRun,
    AnswerSummary,
)

MAX_MISSING_LISTED = 100
COMPARED_METRICS = ("exact_match", "f1", "citation_precision", "citation_recall", "answer_score")


def answer_coverage_result(cases: int, answered: int, missing_case_ids: list[str], floor: float
                           ) -> dg.AssetCheckResult:
    """``answer_coverage``: passed when every case is answered; else WARN, or ERROR below ``floor`` or no cases."""
    coverage = answered / cases if cases else None
    passed = coverage == 1.0
    severity = (dg.AssetCheckSeverity.ERROR if coverage is None or coverage < floor
                else dg.AssetCheckSeverity.WARN)
    shown = "undefined (the dataset has no cases)" if coverage is None else f"{coverage:.1%}"
    metadata = {"coverage": coverage if coverage is not None else dg.MetadataValue.null(),
                "answered": answered, "cases": cases, "floor": floor, "missing": len(missing_case_ids),
                "missing_case_ids": dg.MetadataValue.json(missing_case_ids[:MAX_MISSING_LISTED])}
    return dg.AssetCheckResult(check_name="answer_coverage", passed=passed, severity=severity, metadata=metadata,
                               description=f"{answered}/{cases} cases answered ({shown}); ERROR below {floor:.0%}")


def _cell(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _metric(name: str, m: AnswerMetricSummary) -> dict:
    out: dict[str, float] = {f"{name}_n_scored": m.n_scored, f"{name}_n_skipped": m.n_skipped}
    if m.mean is not None:  # an undefined mean is left out, never 0
        out[name] = m.mean
    return out


def summary_metadata(summary: AnswerSummary) -> dict:
    """An answer run's summary as asset metadata: the metric means, refusal, coverage, verdicts and a table."""
    out: dict = {"cases": summary.cases, "answered": summary.answered, "coverage": summary.coverage}
    rows = ["| metric | mean | n_scored | n_skipped |", "|---|---|---|---|"]
    named = [(n, summary.metrics[n]) for n in ANSWER_METRIC_NAMES]
    named += [("refusal_recall", summary.refusal_recall), ("false_refusal_rate", summary.false_refusal_rate)]
    for name, m in named:
        out.update(_metric(name, m))
        rows.append(f"| {name} | {_cell(m.mean)} | {m.n_scored} | {m.n_skipped} |")
    counts = {v: summary.verdicts.get(v, 0) for v in VERDICTS}  # the documented order (stored JSON keeps none)
    out["verdicts"] = dg.MetadataValue.json(counts)
    verdicts = ["", "| verdict | cases |", "|---|---|", *(f"| {v} | {n} |" for v, n in counts.items())]
    out["summary"] = dg.MetadataValue.md("\n".join(rows + verdicts))
    return out


def dataset_view_metadata(runs: list[AnswerRun], baseline: AnswerRun | None,
                          comparisons: list[AnswerComparison]) -> dict:
    """``answer_run_summary``: the latest run per answerer side by side, each against the baseline's."""
    names = COMPARED_METRICS
    head = ["answerer", "run", "coverage", *(ANSWER_METRIC_LABELS[n] for n in names), "refusal R", "false refusal"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        s = r.summary
        cells = [f"{r.answerer}@{r.answerer_version[:12]}", r.run_id[:8], f"{s.coverage:.1%}",
                 *(_cell(s.metrics[n].mean) for n in names), _cell(s.refusal_recall.mean),
                 _cell(s.false_refusal_rate.mean)]
        lines.append("| " + " | ".join(cells) + " |")
    out: dict = {"answerers": len(runs), "table": dg.MetadataValue.md("\n".join(lines))}
    if baseline is not None:
        out["baseline"] = f"{baseline.answerer} ({baseline.run_id[:8]})"
    if comparisons:
        rows = ["| answerer | metric | n | delta vs baseline | p |", "|---|---|---|---|---|"]
        for c in comparisons:
            for m in c.metrics:
                if m.metric in COMPARED_METRICS:
                    rows.append(f"| {c.run_b.answerer} | {m.metric} | {m.n} | {_cell(m.delta)} | {_cell(m.p_value)} |")
        out["compared_with_baseline"] = dg.MetadataValue.md("\n".join(rows))
    return out
