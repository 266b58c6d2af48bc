"""Inline SVG charts drawn on the server: a metric over time, a line per strategy, a link per point."""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup, escape

from rag_pipeline.contracts.runs import HistoryPoint

PALETTE = ("#2457c5", "#d9480f", "#2b8a3e", "#862e9c", "#c92a2a", "#0b7285", "#e67700", "#495057",
           "#5c7cfa", "#a61e4d")
WIDTH, HEIGHT = 388, 200
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 22, 34


def strategy_colours(versions: Sequence[str]) -> dict[str, str]:
    """A stable colour per strategy version (sorted order), shared by the legend and every chart."""
    return {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(sorted(set(versions)))}


def _y_range(values: Sequence[float], floor: float = 0.0) -> tuple[float, float]:
    """The y axis: the values' range padded and rounded out to tenths, within [floor, 1], at least 0.1 tall."""
    lo = max(floor, math.floor((min(values) - 0.02) * 10) / 10)
    hi = min(1.0, math.ceil((max(values) + 0.02) * 10) / 10)
    if hi - lo < 0.1:
        lo, hi = (hi - 0.1, hi) if hi - 0.1 >= floor else (floor, floor + 0.1)
    return lo, hi


def history_svg(points: Sequence[HistoryPoint], metric: str, label: str, colours: dict[str, str],
                run_url: str = "/admin/retrieval-evaluations/runs/", floor: float = 0.0) -> Markup:
    """One chart: ``metric`` of every run against its finish time, a line per strategy (``floor``: its minimum)."""
    shown = [p for p in points if metric in p.metrics]
    head = (f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
            f'aria-label="{escape(label)} over time"><text x="{LEFT}" y="14" style="font-weight:600;fill:#1d2330">'
            f"{escape(label)} over time</text>")
    if not shown:
        return Markup(head + f'<text x="{LEFT}" y="{HEIGHT // 2}">no succeeded run yet</text></svg>')
    times = [p.finished_at.timestamp() for p in shown]
    t0, t1 = min(times), max(times)
    lo, hi = _y_range([p.metrics[metric] for p in shown], floor)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + (plot_w / 2 if t1 == t0 else (t - t0) / (t1 - t0) * plot_w)

    def y(v: float) -> float:
        return TOP + (hi - v) / (hi - lo) * plot_h

    parts = [head]
    step = next(s for s in (0.05, 0.1, 0.2, 0.25, 0.5) if (hi - lo) / s <= 5)
    for i in range(round((hi - lo) / step) + 1):
        v = lo + step * i
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e3e7ed"/>'
                     f'<text x="{LEFT - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    first, last = min(shown, key=lambda p: p.finished_at), max(shown, key=lambda p: p.finished_at)
    parts.append(f'<text x="{LEFT}" y="{HEIGHT - 12}">{first.finished_at:%m-%d %H:%M}</text>')
    if t1 > t0:
        parts.append(f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - 12}" text-anchor="end">'
                     f"{last.finished_at:%m-%d %H:%M} UTC</text>")
    for version in sorted({p.strategy_version for p in shown}):
        series = sorted((p for p in shown if p.strategy_version == version), key=lambda p: p.finished_at)
        colour = colours.get(version, PALETTE[0])
        coords = " ".join(f"{x(p.finished_at.timestamp()):.1f},{y(p.metrics[metric]):.1f}" for p in series)
        if len(series) > 1:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.8" points="{coords}"/>')
        for p in series:
            tip = (f"{p.strategy_version}: {label} {p.metrics[metric]:.4f} — dataset version {p.dataset_version[:12]}"
                   f", finished {p.finished_at:%Y-%m-%d %H:%M} UTC, run {p.run_id[:8]}"
                   + (" (current)" if p.is_current else ""))
            parts.append(f'<a href="{run_url}{p.run_id}"><circle cx="{x(p.finished_at.timestamp()):.1f}" '
                         f'cy="{y(p.metrics[metric]):.1f}" r="{4 if p.is_current else 3}" fill="{colour}" '
                         f'stroke="#fff" stroke-width="1"><title>{escape(tip)}</title></circle></a>')
    parts.append("</svg>")
    return Markup("".join(parts))
