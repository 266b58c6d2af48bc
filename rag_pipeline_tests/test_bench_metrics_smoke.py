"""Smoke-run bench/metrics_bench.py on a small query set (ranx JIT warm-up dominates).

Beyond "it runs": the means it prints are recomputed here with pytrec_eval (trec_eval) on the same seeded data
(``bench/metrics_bench.py``'s own ``make_data``), and its ratios equal its timings and lie in sane bounds.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "metrics_bench.py"
LAST_LINE = re.compile(
    r"ours_s=(?P<ours>\S+) ranx_s=(?P<ranx>\S+) pytrec_s=(?P<pytrec>\S+) "
    r"vs_ranx=(?P<vs_ranx>\S+) vs_pytrec=(?P<vs_pytrec>\S+)"
)
QUERIES, K = 2000, 10


def _reference_means() -> dict[str, float]:
    """P@10, recall@10, nDCG@10 by pytrec_eval and MRR@10 by hand, on the bench's data (seed 0, depth 100)."""
    import pytrec_eval  # dev dependency

    sys.path.insert(0, str(BENCH.parent))
    try:
        from metrics_bench import make_data  # the bench's own generator
    finally:
        sys.path.remove(str(BENCH.parent))
    retrieved, relevant = make_data(QUERIES, 100, 0)
    qids = [f"q{i}" for i in range(QUERIES)]
    run = {q: {doc: float(len(ids) - r) for r, doc in enumerate(ids)} for q, ids in zip(qids, retrieved)}
    per_query = pytrec_eval.RelevanceEvaluator(dict(zip(qids, relevant)), {f"P.{K}", f"recall.{K}",
                                                                            f"ndcg_cut.{K}"}).evaluate(run)
    means = {name: float(np.mean([per_query[q][measure] for q in qids])) for name, measure in
             (("precision_at_k", f"P_{K}"), ("recall_at_k", f"recall_{K}"), ("ndcg_at_k", f"ndcg_cut_{K}"))}
    means["reciprocal_rank"] = float(np.mean([
        next((1.0 / r for r, doc in enumerate(ids[:K], start=1) if rel.get(doc, 0) > 0), 0.0)
        for ids, rel in zip(retrieved, relevant)]))
    return means


@pytest.mark.slow  # the bench in a subprocess, ranx's JIT warm-up
def test_metrics_bench_smoke() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--queries", str(QUERIES), "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    match = LAST_LINE.fullmatch(lines[-1])
    assert match, proc.stdout
    values = {name: float(value) for name, value in match.groupdict().items()}
    [means_line] = [line for line in lines if line.startswith("means: ")]
    printed = {k: float(v) for k, v in (item.split("=") for item in means_line.removeprefix("means: ").split())}
    reference = _reference_means()
    assert set(printed) == set(reference)
    for name, value in reference.items():
        assert abs(printed[name] - value) <= 5e-7, (name, printed[name], value)  # printed with 6 decimals
    # the ratios are the timings' ratios (printed with 2 decimals) and lie in sane bounds
    assert values["vs_ranx"] == pytest.approx(values["ranx"] / values["ours"], rel=0.01, abs=0.006)
    assert values["vs_pytrec"] == pytest.approx(values["pytrec"] / values["ours"], rel=0.01, abs=0.006)
    assert 0 < values["ours"] < 10, values  # 2,000 queries on prebuilt arrays: milliseconds
    assert 0.1 <= values["vs_ranx"] <= 10_000 and 0.1 <= values["vs_pytrec"] <= 10_000, values
