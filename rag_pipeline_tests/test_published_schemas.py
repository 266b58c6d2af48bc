"""The report's JSON Schemas checked in under ``schemas/`` are the ones the contracts generate (the report is
written by dumping the contracts).

After changing a contract, write them again: ``python -m rag_pipeline_tests.test_published_schemas``.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from rag_pipeline.contracts.answers import answers_json_schema
from rag_pipeline.contracts.reports import REPORT_VERSION, JsonlHeader, Report, json_schema

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


if __name__ == "__main__":
    for name, model in PUBLISHED.items():
        (SCHEMAS / name).write_text(_text(model), encoding="utf-8")
    (SCHEMAS / ANSWERS_SCHEMA).write_text(_answers_text(), encoding="utf-8")
