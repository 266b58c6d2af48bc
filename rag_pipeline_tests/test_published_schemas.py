"""The JSON Schemas checked in under ``docs/schemas/`` are the ones the contracts generate.

After changing a contract, write them again: ``python -m rag_pipeline_tests.test_published_schemas``.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from rag_pipeline.contracts.reports import JsonlHeader, Report, json_schema

SCHEMAS = Path(__file__).resolve().parents[1] / "docs" / "schemas"
PUBLISHED = {"evaluation-report.schema.json": Report, "evaluation-report-jsonl-header.schema.json": JsonlHeader}


def _text(model) -> str:
    return json.dumps(json_schema(model), ensure_ascii=False, indent=2) + "\n"


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_the_checked_in_schema_is_the_generated_one(name):
    schema = json_schema(PUBLISHED[name])
    jsonschema.Draft202012Validator.check_schema(schema)
    assert (SCHEMAS / name).read_text(encoding="utf-8") == _text(PUBLISHED[name]), (
        f"docs/schemas/{name} is out of date: python -m rag_pipeline_tests.test_published_schemas")


if __name__ == "__main__":
    for name, model in PUBLISHED.items():
        (SCHEMAS / name).write_text(_text(model), encoding="utf-8")
