"""Rendering of a :class:`~rag_pipeline.contracts.comparison.StrategyComparison`: markdown tables, a bar chart
PNG (matplotlib, Agg backend) and the plain text the ``compare`` command prints."""

from __future__ import annotations

import io
import math

from rag_pipeline.analysis.comparison import PRIMARY_METRIC, failure_description
from rag_pipeline.analysis.text_table import text_table
from rag_pipeline.contracts.comparison import StrategyComparison, TopChunk
from rag_pipeline.contracts.metrics import METRIC_LABELS
from rag_pipeline.storage.names import printable


def _num(x, fmt: str = ".4f") -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return "\n".join(lines + ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows])


SCORED_CASES = "scored cases: the answerable ones, which the means average over (an unanswerable case has no " \
               "retrieval metric)"


def metric_table(comp: StrategyComparison) -> str:
    """One row per strategy: averages, and Δ vs the baseline for every metric."""
    return _table(*_metric_rows(comp))


def _metric_rows(comp: StrategyComparison) -> tuple[list[str], list[list[str]]]:
    headers = ["strategy", "scored cases", *(METRIC_LABELS.get(m, m) for m in comp.metrics), "Judged@k", "run"]
    rows = []
    for run in comp.runs:
        cells = []
        for m in comp.metrics:
            value = _num(run.mean(m))
            if run.strategy != comp.baseline:
                match = [p for p in comp.paired if p.strategy == run.strategy and p.metric == m]
                value += f" ({match[0].delta:+.4f})" if match else ""
            cells.append(value)
        name = run.strategy + (" (baseline)" if run.strategy == comp.baseline else "")
        rows.append([name, str(run.cases), *cells, _num(run.judged_at_k, ".2f"), run.run_id[:8]])
    return headers, rows


def significance_table(comp: StrategyComparison) -> str:
    return _table(*_significance_rows(comp))


def _significance_rows(comp: StrategyComparison) -> tuple[list[str], list[list[str]]]:
    headers = ["strategy", "metric", "n", "Δ mean", "95% CI", "perm. p", "Holm p", "t-test p", "win/tie/loss"]
    rows = [[p.strategy, METRIC_LABELS.get(p.metric, p.metric), str(p.n), f"{p.delta:+.4f}",
             f"[{p.ci_low:+.4f}, {p.ci_high:+.4f}]", _num(p.p_value, ".4g"), _num(p.p_holm, ".4g"),
             _num(p.ttest_p, ".4g"), f"{p.wins}/{p.ties}/{p.losses}"] for p in comp.paired]
    return headers, rows


def _chunks(items: list[TopChunk]) -> str:
    return "<br>".join(f"{c.rank}. {'✅' if c.is_relevant else '·'} {c.document_name} `{c.chunk_id[:8]}`"
                       for c in items) or "—"


def moved_table(comp: StrategyComparison) -> str:
    headers = ["strategy", "case", "baseline", "strategy value", "Δ", "top before", "top after"]
    rows = [[v, m.case_id, _num(m.baseline), _num(m.strategy), f"{m.delta:+.4f}", _chunks(m.before), _chunks(m.after)]
            for v, moved in comp.moved.items() for m in moved]
    return _table(headers, rows) if rows else "_no case changed on the primary metric_"


def chart_png(comp: StrategyComparison) -> bytes:
    """Grouped bars: the average of every metric per strategy (baseline first)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    from matplotlib.figure import Figure  # noqa: PLC0415

    from rag_pipeline.analysis.tuning.chart import chart_fonts  # noqa: PLC0415 (CJK labels)

    with chart_fonts():
        fig = Figure(figsize=(max(6.0, 1.6 * len(comp.metrics) + 0.4 * len(comp.runs)) + 2.2, 3.8), dpi=100)
        ax = fig.subplots()
        width = 0.8 / max(len(comp.runs), 1)
        for i, run in enumerate(comp.runs):
            xs = [j + (i - (len(comp.runs) - 1) / 2) * width for j in range(len(comp.metrics))]
            ax.bar(xs, [run.mean(m) for m in comp.metrics], width, label=run.strategy)
        ax.set_xticks(range(len(comp.metrics)), [METRIC_LABELS.get(m, m) for m in comp.metrics])
        ax.set_ylim(0, 1)
        ax.set_title(f"dataset {comp.dataset}: strategies vs baseline {comp.baseline}")
        # right of the plot area: inside, it covered the bars (which reach 1.0)
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
        fig.tight_layout()
        out = io.BytesIO()
        fig.savefig(out, format="png", bbox_inches="tight")
    return out.getvalue()


def _plain_chunks(items: list[TopChunk]) -> str:
    return "  ".join(f"{c.rank}. {'✓' if c.is_relevant else '·'} {printable(c.document_name)} {c.chunk_id[:8]}"
                     for c in items) or "—"


def _plain_table(headers: list[str], rows: list[list[str]]) -> str:
    return text_table(headers, [[printable(c) for c in r] for r in rows])


def gate_line(comp: StrategyComparison) -> str:
    """``Regression gate passed: ...`` / ``Regression gate FAILED: ...`` (plain text; several failing strategies
    one per line)."""
    gate = comp.gate
    if gate.passed or len(gate.failing) < 2:
        return f"Regression gate {'passed' if gate.passed else 'FAILED'}: {printable(gate.description)}"
    each = [printable(failure_description(p)) for p in comp.paired if p.metric == gate.metric
            and p.strategy in gate.failing]
    return "\n  - ".join(["Regression gate FAILED:", *each])


def render_plain(comp: StrategyComparison, *, details: bool = True) -> str:
    """The comparison as plain terminal text (no markdown emphasis): the metric table, with ``details`` the
    paired significance and the cases that moved most, then the gate and the notes."""
    versions = sorted({r.dataset_version[:12] for r in comp.runs if r.dataset_version})
    version = f", version {', '.join(versions)}" if versions else ""
    title = (f"Strategies on dataset {printable(comp.dataset)}{version} (baseline {printable(comp.baseline)}; "
             f"Δ vs the baseline in parentheses; {SCORED_CASES})")
    parts = [title, _plain_table(*_metric_rows(comp))]
    if details and comp.paired:
        parts += ["Paired significance (strategy − baseline, per case)", _plain_table(*_significance_rows(comp))]
        moved = [(f"Cases that moved most on {METRIC_LABELS.get(PRIMARY_METRIC, PRIMARY_METRIC)} "
                  "(baseline → strategy; top chunks: ✓ relevant, · not)")]
        for v, cases in comp.moved.items():
            for m in cases:
                moved.append(f"  {printable(v)}  {printable(m.case_id)}  {_num(m.baseline)} → "
                             f"{_num(m.strategy)} ({m.delta:+.4f})")
                if m.before or m.after:
                    moved += [f"      before: {_plain_chunks(m.before)}", f"      after:  {_plain_chunks(m.after)}"]
        parts.append("\n".join(moved) if len(moved) > 1 else "No case changed on the primary metric.")
    parts.append(gate_line(comp))
    parts += [f"Warning: {printable(w)}" for w in comp.judged_warnings]
    parts += [f"Note: {printable(n)}" for n in comp.notes]
    return "\n\n".join(parts)


def render_text(comp: StrategyComparison) -> str:
    """The ``compare`` command's output: :func:`render_plain` with every section (the markdown tables are for
    Dagster metadata)."""
    return render_plain(comp) + "\n"
