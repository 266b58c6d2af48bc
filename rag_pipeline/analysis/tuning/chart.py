"""Chart of a fusion sweep: mean metric vs vector weight, one line per normalisation, each RRF k dotted. Drawn on a
private ``Figure`` (no pyplot state, safe in Dagster workers); :func:`chart_fonts` adds an installed CJK fallback font.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import io
import warnings
from collections.abc import Iterator

from rag_pipeline.analysis.tuning.sweep import FusionConfig, SweepResult
from rag_pipeline.retrieval.fusion import NORMALIZATIONS

CJK_FONTS = (
    "Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans CJK TC", "Noto Sans CJK KR", "Noto Sans SC",
    "Source Han Sans SC", "Source Han Sans CN", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei",
    "Droid Sans Fallback", "AR PL UMing CN", "AR PL UKai CN", "Microsoft YaHei", "SimHei", "PingFang SC",
    "Hiragino Sans GB", "Arial Unicode MS")


@functools.cache
def cjk_font() -> str | None:
    """The name of an installed font with CJK glyphs (from :data:`CJK_FONTS`, else any "CJK" font), or None."""
    from matplotlib import font_manager  # noqa: PLC0415 - matplotlib only when a chart is drawn

    def pick() -> str | None:
        names = {f.name for f in font_manager.fontManager.ttflist}
        return next((n for n in CJK_FONTS if n in names), None) or next((n for n in sorted(names) if "CJK" in n), None)

    if (found := pick()) is None:  # matplotlib's font cache predates a font installed since: add the system's CJK files
        for path in font_manager.findSystemFonts():
            if "cjk" in path.lower():
                font_manager.fontManager.addfont(path)
        found = pick()
    return found


@contextlib.contextmanager
def chart_fonts() -> Iterator[str | None]:
    """While building and saving a figure: DejaVu Sans with a CJK font as per-glyph fallback when one is
    installed (yields its name); otherwise matplotlib's missing-glyph warnings are silenced (yields None)."""
    import matplotlib  # noqa: PLC0415 - matplotlib only when a chart is drawn

    cjk = cjk_font()
    with matplotlib.rc_context({"font.family": ["DejaVu Sans", *([cjk] if cjk else [])]}), \
            warnings.catch_warnings():
        if cjk is None:
            warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from font", category=UserWarning)
        yield cjk


def plot_sweep(result: SweepResult[FusionConfig], base: FusionConfig | None = None,
               title: str | None = None, dpi: int = 100) -> bytes:
    """PNG bytes of the sweep chart (mean of ``result.metric`` over all cases)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - see chart_fonts
    from matplotlib.figure import Figure  # noqa: PLC0415

    with chart_fonts():
        means = result.means
        figure = Figure(figsize=(10, 4.8), dpi=dpi)
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
                          textcoords="offset points", xycoords=("axes fraction", "data"), va="center", color="grey")
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
        axes.set_title(title or f"Fusion sweep: mean {result.metric} over {result.case_ids.size} cases")
        # outside the plot area, right of the RRF k labels, so it never covers a line
        axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.08, 1.0), borderaxespad=0.0)
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", bbox_inches="tight")
        return buffer.getvalue()


def markdown_image(png: bytes, alt: str = "sweep") -> str:
    """``![alt](data:image/png;base64,...)`` for Dagster ``MetadataValue.md``."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"


def sweep_markdown(result: SweepResult[FusionConfig], base: FusionConfig | None = None,
                   title: str | None = None) -> str:
    """The sweep chart as a markdown image."""
    return markdown_image(plot_sweep(result, base, title))
