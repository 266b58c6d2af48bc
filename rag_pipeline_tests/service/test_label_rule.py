"""One rule decides whether a dataset can run (docs/design.md §8): ``label_rule`` of the service, which the CLI and
the API apply through ``check_labels_first`` and the Dagster asset check ``label_integrity`` through its severity."""

from __future__ import annotations

import dagster as dg
import pytest

from rag_pipeline.contracts.label_check import LabelReport, LabelStatus
from rag_pipeline.defs.checks import label_integrity_result
from rag_pipeline.service.evaluations import label_rule


def _report(labels: dict[str, list[bool]]) -> LabelReport:
    rows = [LabelStatus(case_id=case, chunk_id=f"{case}-{i}", status="ok" if ok else "unknown_id", detail="d")
            for case, oks in labels.items() for i, ok in enumerate(oks)]
    verdicts = {case: "ok" if all(oks) else "all_invalid" if not any(oks) else "some_invalid"
                for case, oks in labels.items()}
    return LabelReport(knowledge_base="kb", rows=rows, verdicts=verdicts)


CASES = {
    "all valid": ({"a": [True], "b": [True, True]}, "ok"),
    "one label of two invalid": ({"a": [True, False]}, "warn"),
    "35 of 5000 cases without a valid label": ({**{f"bad{i}": [False] for i in range(35)},
                                                **{f"ok{i}": [True] for i in range(4965)}}, "warn"),
    "no valid label at all": ({"a": [False], "b": [False, False]}, "refuse"),
}


@pytest.mark.parametrize("name", CASES)
def test_the_asset_check_blocks_exactly_when_the_service_refuses(name: str) -> None:
    labels, expected = CASES[name]
    report = _report(labels)
    assert label_rule(report) == expected
    result = label_integrity_result(report)
    assert result.passed == (expected == "ok")
    blocking = not result.passed and result.severity == dg.AssetCheckSeverity.ERROR
    assert blocking == (expected == "refuse"), (name, result.severity)


def test_strict_refuses_any_invalid_label() -> None:
    assert label_rule(_report({"a": [True, False]}), strict=True) == "refuse"
    assert label_rule(_report({"a": [True]}), strict=True) == "ok"
