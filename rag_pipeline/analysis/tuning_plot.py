"""Chart of a fusion sweep: mean metric vs vector weight, one line per normalisation.

Weighted configurations are drawn as lines over the vector weight (keyword
weight = 1 - vector weight); unweighted RRF does not depend on the weight, so
each RRF k is a dotted horizontal line labelled at the right edge. The best
configuration is starred and an optional base configuration is marked with a
cross. Rendering uses matplotlib's Agg canvas on a private ``Figure`` (no
pyplot global state), so it is safe inside Dagster's worker processes.
"""

from __future__ import annotations

import base64
import io

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rag_pipeline.analysis.tuning import FusionConfig, SweepResult
from rag_pipeline.retrieval.fusion import NORMALIZATIONS


def plot_sweep(result: SweepResult, base: FusionConfig | None = None, title: str | None = None,
               dpi: int = 100) -> bytes:
    """PNG bytes of the sweep chart (mean of ``result.metric`` over all cases)."""
    means = result.means
    figure = Figure(figsize=(8, 4.8), dpi=dpi)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for norm in NORMALIZATIONS:
        points = sorted((c.vector_weight, float(means[i])) for i, c in enumerate(result.configs)
                        if c.fusion == "weighted" and c.normalization == norm)
        if points:
            axes.plot(*zip(*points), marker=".", linewidth=1.5, label=f"weighted, {norm}")
    rrf = [(c, float(means[i])) for i, c in enumerate(result.configs) if c.fusion == "rrf"]
    for j, (config, value) in enumerate(sorted(rrf, key=lambda item: item[0].rrf_k)):
        axes.axhline(value, color="grey", linestyle=":", linewidth=1,
                     label="rrf (per k, right labels)" if j == 0 else None)
        axes.annotate(f"k={config.rrf_k}", (1.0, value), xytext=(4, 0), fontsize=7,
                      textcoords="offset points", xycoords=("axes fraction", "data"),
                      va="center", color="grey")
    best = result.best_config
    best_x = best.vector_weight if best.fusion == "weighted" else 0.5
    axes.plot([best_x], [float(means[result.best_index])], marker="*", markersize=14,
              color="black", linestyle="none", label=f"best: {best.label}")
    if base is not None and base in result.configs:
        index = result.configs.index(base)
        base_x = base.vector_weight if base.fusion == "weighted" else 0.5
        axes.plot([base_x], [float(means[index])], marker="X", markersize=10, color="red",
                  linestyle="none", label=f"base: {base.label}")
    axes.set_xlabel("vector weight (keyword weight = 1 - vector weight)")
    axes.set_ylabel(f"mean {result.metric}")
    axes.set_xlim(-0.02, 1.02)
    axes.grid(True, alpha=0.3)
    axes.set_title(title or f"Fusion sweep: mean {result.metric} over "
                            f"{result.case_ids.size} cases")
    axes.legend(fontsize=7, loc="best")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def markdown_image(png: bytes, alt: str = "sweep") -> str:
    """``![alt](data:image/png;base64,...)`` for Dagster ``MetadataValue.md``."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"


def sweep_markdown(result: SweepResult, base: FusionConfig | None = None,
                   title: str | None = None) -> str:
    """The sweep chart as a markdown image."""
    return markdown_image(plot_sweep(result, base, title))
