"""Strategy comparison: statistics against scipy/statsmodels on the same data, the regression gate on
constructed per-case values, rendering, and loading current runs from real stored evaluation runs."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats
from statsmodels.stats.multitest import multipletests

from rag_pipeline.analysis import comparison_report
from rag_pipeline.analysis.comparison import (
    ComparisonError,
    StrategyRun,
    compare,
    regression_gate,
)
from rag_pipeline.analysis.tuning.chart import markdown_image
from rag_pipeline.evaluation.metrics import METRIC_NAMES


def _run(version: str, ndcg: np.ndarray, *, other: float = 0.5) -> StrategyRun:
    per_case = {f"case-{i:02d}": {m: (float(v) if m == "ndcg_at_k" else other) for m in METRIC_NAMES}
                for i, v in enumerate(ndcg)}
    return StrategyRun(version, f"{version}-run-0000", per_case)


def _data(n: int = 12, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.2, 0.9, n)
    return {"hybrid-v1": base, "worse": np.clip(base - rng.uniform(0.05, 0.3, n), 0, 1),
            "same": np.clip(base + rng.normal(0, 0.05, n), 0, 1),
            "better": np.clip(base + rng.uniform(0.02, 0.15, n), 0, 1)}


def test_statistics_match_scipy_and_statsmodels():
    data = _data()
    comp = compare([_run(v, x) for v, x in data.items()], metrics=("ndcg_at_k",), n_resamples=20000)
    base = data["hybrid-v1"]
    for version in ("worse", "same", "better"):
        r = comp.result(version)
        a = data[version]
        # 2**12 = 4096 <= n_resamples: the exact sign-flip distribution, as scipy enumerates it.
        ref = scipy_stats.permutation_test((a, base), lambda x, y, axis: np.mean(x - y, axis=axis),
                                           permutation_type="samples", vectorized=True, n_resamples=20000,
                                           alternative="two-sided")
        assert r.p_value == pytest.approx(ref.pvalue, rel=1e-9)
        assert r.ttest_p == pytest.approx(scipy_stats.ttest_rel(a, base).pvalue, rel=1e-9)
        assert r.delta == pytest.approx(np.mean(a - base))
        boot = scipy_stats.bootstrap(((a - base),), np.mean, n_resamples=20000, method="percentile",
                                     confidence_level=0.95, random_state=0)
        assert r.ci_low == pytest.approx(boot.confidence_interval.low, abs=0.01)
        assert r.ci_high == pytest.approx(boot.confidence_interval.high, abs=0.01)
        assert (r.wins, r.ties, r.losses) == (int((a > base).sum()), int((a == base).sum()), int((a < base).sum()))
    raw = [comp.result(v).p_value for v in ("better", "same", "worse")]  # compare() orders by version
    expected = multipletests(raw, method="holm")[1]
    assert [comp.result(v).p_holm for v in ("better", "same", "worse")] == pytest.approx(expected)
    assert [r.strategy for r in comp.runs] == ["hybrid-v1", "better", "same", "worse"]


def test_gate_fails_on_a_significant_regression_and_respects_the_margin():
    data = _data(n=30, seed=3)
    comp = compare([_run(v, x) for v, x in data.items()], metrics=("ndcg_at_k",), n_resamples=5000)
    worse = comp.result("worse")
    assert worse.delta < -0.05 and worse.p_holm < 0.05
    gate = regression_gate(comp.paired, margin=0.0, alpha=0.05)
    assert not gate.passed and gate.failing == ["worse"] and gate == comp.gate
    assert "worse is worse than the baseline on ndcg_at_k" in gate.description
    # The same regression within a generous margin passes; so does a run with only noise.
    assert regression_gate(comp.paired, margin=-worse.delta + 0.01).passed
    noise = compare([_run("hybrid-v1", data["hybrid-v1"]), _run("same", data["same"])], metrics=("ndcg_at_k",))
    assert noise.gate.passed
    with pytest.raises(ValueError):
        regression_gate(comp.paired, alpha=1.5)


def test_gate_on_a_tiny_but_consistent_loss_depends_on_margin():
    base = np.linspace(0.3, 0.9, 40)
    comp = compare([_run("hybrid-v1", base), _run("slightly-worse", base - 0.02)], metrics=("ndcg_at_k",))
    r = comp.result("slightly-worse")
    assert r.losses == 40 and r.p_holm < 0.001
    assert not regression_gate(comp.paired, margin=0.01).passed
    assert compare([_run("hybrid-v1", base), _run("slightly-worse", base - 0.02)], metrics=("ndcg_at_k",),
                   margin=0.03).gate.passed


def test_moved_cases_pairing_notes_and_missing_baseline():
    base = np.array([0.1, 0.5, 0.9, 0.4])
    other = _run("rrf-v1", np.array([0.9, 0.5, 0.2, 0.4]))
    del other.per_case["case-03"]
    comp = compare([_run("hybrid-v1", base), other], metrics=("ndcg_at_k",), top_moved=5)
    assert [m.case_id for m in comp.moved["rrf-v1"]] == ["case-00", "case-02"]
    assert comp.moved["rrf-v1"][0].delta == pytest.approx(0.8)
    assert comp.result("rrf-v1").n == 3 and "paired on the 3 case ids" in comp.notes[0]
    with pytest.raises(ComparisonError, match="baseline strategy 'bm25-v1' has no current run"):
        compare([other], baseline="bm25-v1", dataset="demo")


def test_rendering_markdown_chart_and_json():
    data = _data()
    comp = compare([_run(v, x) for v, x in data.items()], n_resamples=1000)
    md = comparison_report.metric_table(comp) + comparison_report.significance_table(comp)
    assert "| worse |" in md and "Holm p" in md
    assert f"{comp.result('better').delta:+.4f}" in md
    png = comparison_report.chart_png(comp)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 2000
    assert markdown_image(png, "strategy comparison").startswith("![strategy comparison](data:image/png;base64,iVBOR")
    as_dict = comp.model_dump(mode="json")
    # precision is constant 0.5 everywhere: the t-test p is undefined and must be JSON-safe (None, not NaN).
    assert any(p["metric"] == "precision_at_k" and p["ttest_p"] is None for p in as_dict["paired"])
