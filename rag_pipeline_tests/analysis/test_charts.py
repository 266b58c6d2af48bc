"""The comparison and fusion-sweep charts: legend outside the plot area, Chinese labels render."""

from __future__ import annotations

import io
import os
import warnings

import numpy as np
import pytest
from matplotlib.figure import Figure

from rag_pipeline.analysis import comparison_report
from rag_pipeline.analysis.comparison import StrategyRun, compare
from rag_pipeline.analysis.tuning.chart import chart_fonts, cjk_font, plot_sweep
from rag_pipeline.analysis.tuning.sweep import FusionConfig, sweep
from rag_pipeline.evaluation.metrics import METRIC_NAMES
from rag_pipeline_tests.analysis.test_tuning import _known_best_pools

PNG = b"\x89PNG\r\n\x1a\n"


def _run(version: str, ndcg: np.ndarray) -> StrategyRun:
    per_case = {f"case-{i:02d}": {m: (float(v) if m == "ndcg_at_k" else 0.95) for m in METRIC_NAMES}
                for i, v in enumerate(ndcg)}
    return StrategyRun(version, f"{version}-run-0000", per_case)


def _comparison(versions: list[str], dataset: str = "demo"):
    rng = np.random.default_rng(3)
    base = rng.uniform(0.8, 1.0, 10)  # bars up to the top of the plot, where the legend used to sit
    return compare([_run(v, np.clip(base - 0.05 * i, 0, 1)) for i, v in enumerate(versions)],
                   baseline=versions[0], dataset=dataset, n_resamples=200)


@pytest.fixture
def saved_figures(monkeypatch) -> list[Figure]:
    """Every Figure the charts save, to inspect its layout."""
    figures: list[Figure] = []
    original = Figure.savefig

    def savefig(self, *args, **kwargs):
        figures.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return figures


def _legend_outside_axes(figure: Figure) -> None:
    renderer = figure._get_renderer()
    (axes,) = figure.axes
    legend = axes.get_legend()
    assert legend is not None
    box, area = legend.get_window_extent(renderer), axes.get_window_extent(renderer)
    assert box.x0 >= area.x1 or box.y1 <= area.y0, (box, area)  # right of or below the plot area


def test_comparison_chart_legend_is_outside_the_bars(saved_figures):
    png = comparison_report.chart_png(_comparison(["hybrid-v1", "keyword-v1", "vector-v1", "hybrid-bm25-v1"]))
    assert png.startswith(PNG)
    _legend_outside_axes(saved_figures[-1])


def test_sweep_chart_legend_is_outside_the_lines(saved_figures):
    base, pools = _known_best_pools()
    png = plot_sweep(sweep(pools), base=FusionConfig.from_strategy(base))
    assert png.startswith(PNG)
    _legend_outside_axes(saved_figures[-1])


def test_chinese_labels_render_without_glyph_warnings():
    comp = _comparison(["混合检索-v1", "关键词-v1"], dataset="中文数据集")
    base, pools = _known_best_pools()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert comparison_report.chart_png(comp).startswith(PNG)
        assert plot_sweep(sweep(pools), base=FusionConfig.from_strategy(base), title="融合权重扫描").startswith(PNG)
    glyphs = [str(w.message) for w in caught if "missing from font" in str(w.message)]
    # without a CJK font the glyphs render as boxes, silently; with one, no glyph is missing at all
    assert glyphs == []


def test_a_cjk_font_is_used_when_installed():
    if cjk_font() is None:
        message = "no CJK font installed (Debian fonts-noto-cjk): Chinese labels render as boxes, silently"
        if os.environ.get("CI"):  # .ci/run installs the font, so CI always runs this test
            pytest.fail(message + " — .ci/run should have installed fonts-noto-cjk", pytrace=False)
        pytest.skip(message)
    with chart_fonts() as font, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figure = Figure()
        figure.add_subplot().set_title("中文标题")
        figure.savefig(io.BytesIO(), format="png")
    assert font == cjk_font()
    assert not [w for w in caught if "missing from font" in str(w.message)]
