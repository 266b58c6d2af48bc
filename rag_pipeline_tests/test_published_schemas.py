"""The report's JSON Schemas checked in under ``schemas/`` are the ones the contracts generate, and the report's
dicts follow the contracts.

After changing a contract, write them again: ``python -m rag_pipeline_tests.test_published_schemas``.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest

from rag_pipeline.contracts.answers import answers_json_schema
from rag_pipeline.contracts.reports import REPORT_VERSION, Candidate, JsonlHeader, Report, json_schema
from rag_pipeline.contracts.runs import DatasetRef, KnowledgeBaseRef, RunSummary
from rag_pipeline.evaluation import reports

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
PUBLISHED = {f"evaluation-report-v{REPORT_VERSION}.json": Report,
             f"evaluation-report-jsonl-header-v{REPORT_VERSION}.json": JsonlHeader}


ANSWERS_SCHEMA = "answers-v1.json"  # one line of an answers file (docs/design.md §12.2)


def _text(model) -> str:
    return json.dumps(json_schema(model), ensure_ascii=False, indent=2) + "\n"


def _answers_text() -> str:
    return json.dumps(answers_json_schema(), ensure_ascii=False, indent=2) + "\n"


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_the_checked_in_schema_is_the_generated_one(name):
    schema = json_schema(PUBLISHED[name])
    jsonschema.Draft202012Validator.check_schema(schema)
    assert (SCHEMAS / name).read_text(encoding="utf-8") == _text(PUBLISHED[name]), (
        f"schemas/{name} is out of date: python -m rag_pipeline_tests.test_published_schemas")


def test_the_checked_in_answers_schema_is_the_generated_one():
    jsonschema.Draft202012Validator.check_schema(answers_json_schema())
    assert (SCHEMAS / ANSWERS_SCHEMA).read_text(encoding="utf-8") == _answers_text(), (
        f"schemas/{ANSWERS_SCHEMA} is out of date: python -m rag_pipeline_tests.test_published_schemas")


def test_the_report_builder_writes_the_contracts_fields_in_their_order():
    """``show`` writes the dicts of evaluation.reports and the API dumps the models: same keys, same order."""
    summary = reports.summary_of(_Any(SimpleNamespace(started_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))))
    assert list(summary) == list(RunSummary.model_json_schema()["properties"])  # the metrics inline, in place
    assert list(summary["dataset"]) == list(DatasetRef.model_fields)
    assert list(summary["knowledge_base"]) == list(KnowledgeBaseRef.model_fields)
    assert list(reports._candidate(_Any(SimpleNamespace()), True)) == list(Candidate.model_fields)


class _Any:
    """A row whose every other column is None."""

    def __init__(self, known: SimpleNamespace) -> None:
        self._known = known

    def __getattr__(self, name: str):
        return getattr(self._known, name, None)


if __name__ == "__main__":
    for name, model in PUBLISHED.items():
        (SCHEMAS / name).write_text(_text(model), encoding="utf-8")
    (SCHEMAS / ANSWERS_SCHEMA).write_text(_answers_text(), encoding="utf-8")
