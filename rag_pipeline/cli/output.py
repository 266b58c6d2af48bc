"""What the commands print: JSON documents, progress bars on stderr, and the text report of ``show RUN --format
text`` (docs/design.md §6.3: the summary, then per case its metrics, the selected chunks and every missed relevant
chunk with the reason in words)."""

from __future__ import annotations

import json
import sys

from rag_pipeline.analysis.text_table import text_table
from rag_pipeline.contracts.metrics import METRIC_LABELS, METRIC_NAMES
from rag_pipeline.contracts.reports import CaseReport, RunDetail
from rag_pipeline.contracts.runs import STAGE_LABELS, RunSummary
from rag_pipeline.storage.names import printable


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


def print_warnings(warnings: list[str]) -> None:
    """Warnings go to stderr, one line each: ``rag-pipeline: warning: ...``."""
    for warning in warnings:
        print(f"rag-pipeline: warning: {warning}", file=sys.stderr)


BAR_STYLE = {"unit_scale": True, "bar_format": "{l_bar}{bar}| {n:,}/{total:,} [{elapsed}<{remaining}, {rate_fmt}]"}
"""Counts and rates read by people: ``1,369,568/2,000,000 [..., 685k chunks/s]``, not ``684784.33chunk/s``."""


def stage_progress():
    """A ``progress(stage, done, total)`` callback drawing one bar per stage (ingestion: chunks)."""
    from tqdm import tqdm  # noqa: PLC0415

    bars: dict[str, tqdm] = {}

    def progress(stage: str, done: int, total: int) -> None:
        bar = bars.get(stage) or bars.setdefault(stage, tqdm(total=total, desc=stage, unit=" chunks",
                                                                        file=sys.stderr, **BAR_STYLE))
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return progress


def case_progress(quiet: bool = False):
    """A ``progress(version, cases)`` factory for evaluations: one bar per strategy run (cases)."""
    from tqdm import tqdm  # noqa: PLC0415

    def for_run(version: str, total: int):
        bar = tqdm(total=total, desc=version, unit=" cases", file=sys.stderr, disable=quiet, **BAR_STYLE)

        def progress(done: int, _total: int) -> None:
            bar.update(done - bar.n)
            if done >= total:
                bar.close()

        return progress

    return for_run


def _number(value) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def _one_line(text: str, width: int = 90) -> str:
    """User text on one line (line breaks as spaces), cut to ``width`` characters with an ellipsis."""
    flat = printable(" ".join(str(text).split()))  # user text: control characters escaped
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def summary_text(summary: RunSummary) -> str:
    """The run's identity, status and mean metrics (``-``: not scored yet, or no scorable case)."""
    rows = [["run", summary.run_id], ["strategy", summary.strategy_version],
            ["status", summary.status + (" (current)" if summary.is_current else "")],
            ["dataset", f"{summary.dataset.name} ({summary.dataset.case_count} cases)"],
            ["knowledge base", summary.knowledge_base.name], ["embedding model", summary.embedding_model or "-"]]
    if summary.error:
        rows.append(["error", summary.error])
    retriever = latency_line(summary)
    if retriever:
        rows.append(["http retriever", retriever])
    means = [getattr(summary.metrics, m) if summary.metrics else None for m in METRIC_NAMES]
    metrics = text_table([METRIC_LABELS[m] for m in METRIC_NAMES], [[_number(v) for v in means]], indent="  ")
    return text_table(None, rows) + "\nmean metrics:\n" + metrics + "\n" + judged_line(summary)


def judged_line(summary: RunSummary) -> str:
    """``Judged@k`` and the pool's judged share of a run (docs/metrics.md), or why there is none."""
    judged = summary.counts.judged if summary.counts else None
    if judged is None or summary.counts is None:
        return "judged: - (not recorded for this run)"
    return (f"judged: Judged@k {_number(judged.at_k)}, pool {_number(judged.pool)}, {judged.unjudged_at_k} unjudged "
            f"chunk(s) in the top k (scored as not relevant)"
            + (f"; {judged.undefined} case(s) retrieved nothing" if judged.undefined else "")
            + (f"; re-scored from run {summary.counts.rescored_from}" if summary.counts.rescored_from else ""))


def latency_line(summary: RunSummary) -> str | None:
    """An ``http`` strategy's run: its retriever's latency p50 / p95 / max and failed cases (else None)."""
    r = summary.counts.retriever if summary.counts else None
    if r is None:
        return None

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f} ms"

    failed = f"; {r.failed_cases} case(s) without a ranking" if r.failed_cases else ""
    resumed = f" ({r.cases_resumed} answered before a resume)" if r.cases_resumed else ""
    return (f"latency p50 {ms(r.latency_p50_ms)}, p95 {ms(r.latency_p95_ms)}, max {ms(r.latency_max_ms)}; "
            f"{r.cases_asked} case(s) asked{resumed}{failed}")


def stage_table(summaries: list[RunSummary]) -> str | None:
    """Seconds of wall time per stage, a column per run with stage times (docs/evaluating.md, "Time per stage");
    None: none has them (an ``http`` strategy's run)."""
    timed = [s for s in summaries if s.stages is not None]
    if not timed:
        return None
    rows = [[f"  {label}", *(f"{getattr(s.stages, key):.2f}" for s in timed)] for key, label in STAGE_LABELS.items()]
    rows.append(["  wall", *(f"{s.stages.wall_s:.2f}" for s in timed if s.stages)])
    width = max(len(r[i]) for r in rows for i in range(1, len(r)))
    headers = ["time per stage (s)", *(printable(s.strategy_version) for s in timed)]
    width = max(width, *(len(h) for h in headers[1:]))
    return text_table([headers[0], *(h.rjust(width) for h in headers[1:])],
                      [[r[0], *(c.rjust(width) for c in r[1:])] for r in rows])


def case_text(case: CaseReport) -> str:
    """One case: question, metrics (or why it has none), the selected chunks and the misses."""
    lines = [f"case {printable(case.case_id)} (k={case.k}): {_one_line(case.question)}"]
    if case.metrics is None:
        lines.append(f"  metrics: not scored — {case.metrics_skipped or 'no metrics'}")
    else:
        lines.append("  " + "  ".join(f"{METRIC_LABELS[m]} {_number(getattr(case.metrics, m))}" for m in METRIC_NAMES))
    if case.judged is not None:
        lines.append(f"  Judged@k {_number(case.judged.at_k)} ({case.judged.unjudged_at_k} unjudged in the top k), "
                     f"pool {_number(case.judged.pool)} of {case.judged.pool_size}"
                     + (f" — {case.judged.reason}" if case.judged.reason else ""))
    selected = [c for c in case.candidates if c.is_selected]
    if selected:
        lines.append("  selected:")
        rows = [[str(c.rank), c.chunk_id, _one_line(c.document_name, 60), _number(c.final_score),
                 "relevant" if c.is_relevant else ("not relevant" if c.chunk_id in case.relevance_grades else "")]
                for c in selected]
        lines.append(text_table(["rank", "chunk", "document", "score", "judged"], rows, indent="    "))
    elif case.retrieved_chunk_ids:
        lines.append("  selected: " + ", ".join(case.retrieved_chunk_ids))
    else:
        lines.append("  selected: none")
    misses = [r for r in case.miss_reasons or [] if r.reason != "hit"]
    if misses:
        lines.append("  missed:")
        lines.append(text_table(None, [[r.chunk_id, r.reason, _one_line(r.detail, 120)] for r in misses],
                                indent="    "))
    elif case.relevant_chunk_ids:
        lines.append("  missed: none")
    return "\n".join(lines)


def report_text(detail: RunDetail) -> str:
    """The text report of a run: its summary, then one block per case."""
    return "\n\n".join([summary_text(detail.summary), *(case_text(c) for c in detail.cases)]) + "\n"
