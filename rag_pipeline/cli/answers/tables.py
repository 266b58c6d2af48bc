"""The text form of the ``answers`` commands (docs/design.md §12.3–12.5); an undefined mean is ``-``."""

from __future__ import annotations

from rag_pipeline.analysis.text_table import text_table
from rag_pipeline.contracts.answers import (
    ANSWER_METRIC_LABELS,
    ANSWER_METRIC_NAMES,
    AnswerCaseResult,
    AnswerCitation,
    AnswerComparison,
    AnswerMetricSummary,
    AnswerReport,
    AnswerRunList,
    AnswerSummary,
    FigureCalibration,
)
from rag_pipeline.storage.names import printable


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _metric_row(name: str, m: AnswerMetricSummary) -> list[str]:
    reasons = ", ".join(f"{printable(r)} {n}" for r, n in sorted(m.skip_reasons.items(), key=lambda kv: -kv[1]))
    return [name, _num(m.mean), str(m.n_scored), str(m.n_skipped), reasons]


def summary_text(summary: AnswerSummary) -> str:
    """Coverage, every metric's mean with n_scored / n_skipped, the refusal figures and the verdict counts."""
    head = (f"cases {summary.cases}  answered {summary.answered}  missing {summary.missing}  errors "
            f"{summary.errors}  coverage {summary.coverage:.1%}  answerable {summary.answerable_cases}  "
            f"unanswerable {summary.unanswerable_cases}  latency p50 {_num(summary.latency_ms_p50, 0)} ms  "
            f"p95 {_num(summary.latency_ms_p95, 0)} ms")
    rows = [_metric_row(name, summary.metrics[name]) for name in ANSWER_METRIC_NAMES if name in summary.metrics]
    rows.append(_metric_row("refusal_recall", summary.refusal_recall))
    rows.append(_metric_row("false_refusal_rate", summary.false_refusal_rate))
    if summary.faithfulness is not None:
        rows.append(_metric_row(f"faithfulness (judge) [{_calibrated(summary, 'faithful')}]", summary.faithfulness))
    verdicts = "  ".join(f"{v} {n}" for v, n in summary.verdicts.items())
    lines = [head, "", text_table(["metric", "mean", "n_scored", "n_skipped", "skipped because"], rows), "",
             f"verdicts: {verdicts}"]
    lines.insert(1, convention_text(summary))
    if summary.calibration:
        lines += ["", "against human verdicts (docs/answers.md, \"Human verdicts\"):"]
        lines += [f"  {c.figure} ({c.decided_by}): {calibration_text(c)}" for c in summary.calibration]
    if summary.missing_case_ids:
        shown = ", ".join(printable(c) for c in summary.missing_case_ids[:10])
        more = f" and {summary.missing - 10} more" if summary.missing > 10 else ""
        lines.append(f"not answered: {shown}{more}")
    return "\n".join(lines)


def _calibrated(summary: AnswerSummary, figure: str) -> str:
    found = next((c for c in summary.calibration if c.figure == figure), None)
    if found is None or found.agreement is None:
        return "not calibrated"
    kappa = found.agreement.kappa.value
    return f"κ {_num(kappa)} vs people, n {found.agreement.n}"


def calibration_text(c: FigureCalibration) -> str:
    """κ, raw agreement, n, base rates and the confusion matrix of one figure against people, or the reason."""
    a = c.agreement
    if a is None:
        return c.reason or "not calibrated"
    why = f" ({a.kappa.reason})" if a.kappa.reason else ""
    (tn, fp), (fn, tp) = a.confusion
    return (f"κ {_num(a.kappa.value)}{why}  agreement {_num(a.raw_agreement)}  n {a.n}  base rate people "
            f"{_num(a.base_rate_a)} / {a.b} {_num(a.base_rate_b)}  confusion (people × {a.b}): both yes {tp}, "
            f"both no {tn}, people yes only {fn}, {a.b} yes only {fp}")


def convention_text(summary: AnswerSummary) -> str:
    """The answer convention the run was scored by and, for squad / cmrc, the official script's figures."""
    line = f"answer convention: {summary.convention or 'auto (per reference; scored before conventions)'}"
    o = summary.official
    if o is None:
        return line
    if o.convention == "cmrc":
        return (f"{line}  official CMRC 2018: EM {_num(o.exact)}  F1 {_num(o.f1)}  AVERAGE {_num(o.average)}  "
                f"TOTAL {o.total}  SKIP {o.skipped}")
    split = "".join(f"  {name} exact {_num(e)} f1 {_num(f)} ({n})" for name, e, f, n in (
        ("HasAns", o.has_ans_exact, o.has_ans_f1, o.has_ans_total), ("NoAns", o.no_ans_exact, o.no_ans_f1,
                                                                       o.no_ans_total)) if n)
    return f"{line}  official SQuAD v2.0: exact {_num(o.exact)}  f1 {_num(o.f1)}  total {o.total}{split}"


def _citation_mark(c: AnswerCitation) -> str:
    relevance = "relevant" if c.is_relevant else "not relevant"
    if c.is_retrieved is False:
        return f"{relevance}, not retrieved"
    return f"{relevance}, not in the knowledge base" if c.in_knowledge_base is False else relevance


def case_text(case: AnswerCaseResult) -> str:
    """One case: verdict and why, the answer, the references, the defined metrics, each citation marked."""
    metrics = "  ".join(f"{ANSWER_METRIC_LABELS[m]} {_num(getattr(case.answer_metrics, m))}"
                        for m in ANSWER_METRIC_NAMES if getattr(case.answer_metrics, m) is not None)
    refused = f"refused ({case.refusal_source})" if case.refused else "not refused"
    lines = [f"{printable(case.case_id)}  {case.verdict}  {refused}  "
             f"{'answerable' if case.answerable else 'unanswerable'}",
             f"  why: {printable(case.verdict_reason)}",
             f"  answer: {printable(case.answer) if case.answer is not None else f'(none: {case.status})'}"]
    if case.reference_answers:
        lines.append(f"  references: {' | '.join(printable(r) for r in case.reference_answers)}")
    lines.append(f"  metrics: {metrics or '-'}")
    lines.extend(f"  cites {printable(c.chunk_id)}: {_citation_mark(c)}" for c in case.citations)
    if case.judge is not None:
        lines.append(f"  judge: faithfulness {_num(case.judge.faithfulness)}  refused {case.judge.refused}")
    return "\n".join(lines)


def report_text(report: AnswerReport) -> str:
    """``answers evaluate`` / ``answers show``: the run's identity, its summary, then every case listed."""
    lines = []
    if report.run is not None:
        r = report.run
        lines.append(f"answer run {r.run_id}  {printable(r.answerer)}@{printable(r.answerer_version)}  dataset "
                     f"{printable(r.dataset)}@{r.dataset_version[:12]}  knowledge base {printable(r.knowledge_base)}"
                     f"  scoring {r.scoring_version}")
    else:
        lines.append("scored, not stored (--no-store)")
    lines.append(summary_text(report.summary))
    if report.cases:
        lines.append("")
        lines.extend(case_text(c) for c in report.cases)
    return "\n".join(lines)


def runs_text(runs: AnswerRunList) -> str:
    """``answers runs``: one row per run, newest first."""
    if not runs.runs:
        return "no answer runs (see `rag-pipeline answers evaluate`)"
    rows = [[r.run_id[:8], r.created_at[:19], printable(r.dataset), printable(r.knowledge_base),
             f"{printable(r.answerer)}@{printable(r.answerer_version)}", f"{r.summary.coverage:.0%}",
             _num(r.summary.metrics["f1"].mean if "f1" in r.summary.metrics else None),
             _num(r.summary.metrics["answer_score"].mean if "answer_score" in r.summary.metrics else None),
             str(r.summary.verdicts.get("correct", 0))] for r in runs.runs]
    table = text_table(["run", "created", "dataset", "knowledge base", "answerer", "coverage", "F1", "score",
                        "correct"], rows)
    return f"{table}\n{len(runs.runs)} of {runs.total} runs"


def comparison_text(c: AnswerComparison) -> str:
    """``answers compare``: per metric the paired means, delta, p-value and interval; then the verdict moves."""
    rows = [[m.metric, str(m.n), _num(m.mean_a), _num(m.mean_b), _num(m.delta), _num(m.p_value, 4),
             "-" if m.ci_low is None else f"[{m.ci_low:.3f}, {m.ci_high:.3f}]"] for m in c.metrics]
    lines = [f"A {c.run_a.run_id[:8]} {printable(c.run_a.answerer)}@{printable(c.run_a.answerer_version)}  vs  "
             f"B {c.run_b.run_id[:8]} {printable(c.run_b.answerer)}@{printable(c.run_b.answerer_version)}  "
             f"({c.common_cases} common cases)", "",
             text_table(["metric", "n", "mean A", "mean B", "delta", "p", "95% CI"], rows), ""]
    a, b = (r.summary.convention or "auto" for r in (c.run_a, c.run_b))
    lines.append(f"answer convention: A {a}, B {b}" + ("" if a == b else
                 "  (differ: EM, F1, contains and the verdicts are not scored alike)"))
    if c.verdict_changes:
        lines.append("verdict changes: " + "  ".join(f"{k} {n}" for k, n in sorted(c.verdict_changes.items())))
    else:
        lines.append("verdict changes: none")
    return "\n".join(lines)
