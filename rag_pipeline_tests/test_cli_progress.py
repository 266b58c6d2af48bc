"""The progress bars of ``ingest`` and ``evaluate`` read as counts and rates a person can take in at a glance."""

from __future__ import annotations

import io
import re
import sys

from rag_pipeline.cli import output


def _drawn(make, *updates) -> str:
    err = io.StringIO()
    real, sys.stderr = sys.stderr, err
    try:
        progress = make()
        for done, total in updates:
            progress(done, total)
    finally:
        sys.stderr = real
    return err.getvalue()


def test_a_fast_stage_shows_a_scaled_rate_in_chunks_per_second():
    text = _drawn(lambda: (lambda p: lambda d, t: p("embed", d, t))(output.stage_progress()),
                  (684_784, 1_000_000), (1_000_000, 1_000_000))
    final = text.replace("\r", "\n").strip().splitlines()[-1]
    assert "1,000,000/1,000,000" in final, final
    assert re.search(r"\d+(\.\d+)?[kMG]? chunks/s", final), final
    assert not re.search(r"\d{4,}\.\d\dchunk", text), text


def test_case_bars_count_cases_with_a_space_before_the_unit():
    text = _drawn(lambda: output.case_progress()("hybrid-v1", 3), (1, 3), (3, 3))
    final = text.replace("\r", "\n").strip().splitlines()[-1]
    assert final.startswith("hybrid-v1: 100%") and "3/3" in final and " cases/s" in final, final
