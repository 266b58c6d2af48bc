"""JSON Schema (draft 2020-12) of a dataset file (:mod:`rag_pipeline.evaluation.dataset`).

For editors, other tools and documentation; :func:`rag_pipeline.evaluation.dataset.parse_dataset` is the
authority and checks more than a schema can: a ``name`` field equal to the file name, unique ``case_id``\\ s,
ids unique after lower-casing, integral grades written ``2`` rather than ``2.0``, NaN/Infinity, duplicate
keys, sizes in bytes, NUL characters. Every file the validator accepts validates against this schema.
"""

from __future__ import annotations

from rag_pipeline.evaluation.dataset import (
    MAX_CASE_ID_CHARS,
    MAX_CASES,
    MAX_GRADE,
    MAX_K,
    MAX_NAME_CHARS,
    MAX_QUESTION_CHARS,
    MAX_RELEVANT_IDS,
    MIN_GRADE,
)

_UUID = {"type": "string",
         "pattern": r"^\s*[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\s*$"}
_GRADE = {"type": "integer", "minimum": MIN_GRADE, "maximum": MAX_GRADE}

RELEVANT_IDS_SCHEMA = {
    "oneOf": [
        {"description": "chunk ids (document_chunks.id), each grade 1",
         "type": "array", "items": _UUID, "minItems": 1, "maxItems": MAX_RELEVANT_IDS, "uniqueItems": True},
        {"description": f"graded: chunk id -> integer grade {MIN_GRADE}-{MAX_GRADE} (0 = judged not relevant); "
                        "at least one grade >= 1",
         "type": "object", "propertyNames": _UUID, "additionalProperties": _GRADE,
         "minProperties": 1, "maxProperties": MAX_RELEVANT_IDS,
         "not": {"additionalProperties": {"const": 0}}},
    ],
}

CASE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["case_id", "question", "relevant_chunk_ids", "k"],
    "properties": {
        "case_id": {"type": "string", "minLength": 1, "maxLength": MAX_CASE_ID_CHARS, "pattern": r"\S"},
        "question": {"type": "string", "minLength": 1, "maxLength": MAX_QUESTION_CHARS, "pattern": r"\S"},
        "relevant_chunk_ids": RELEVANT_IDS_SCHEMA,
        "k": {"type": "integer", "minimum": 1, "maximum": MAX_K},
    },
}

_CASES = {"type": "array", "items": CASE_SCHEMA, "minItems": 1, "maxItems": MAX_CASES}
_TEXT = {"type": ["string", "null"], "minLength": 1, "pattern": r"\S"}

DATASET_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://rag-pipeline.invalid/schemas/evaluation-dataset-v1.json",
    "title": "rag_pipeline evaluation dataset",
    "oneOf": [
        {"description": "seed array of cases (the knowledge base is given by the caller)", **_CASES},
        {"description": "object form",
         "type": "object",
         "additionalProperties": False,
         "required": ["cases"],
         "properties": {
             "name": {**_TEXT, "maxLength": MAX_NAME_CHARS, "pattern": r"^[^.\s/\\|,\[\]\x00-\x1f\x7f][^\s/\\|,\[\]\x00-\x1f\x7f]*$",
                      "not": {"type": "string", "pattern": r"\.\.\."},
                      "description": "must equal the file name without .json (the dataset's identity)"},
             "knowledge_base": {**_TEXT, "maxLength": MAX_NAME_CHARS},
             "description": {**_TEXT, "maxLength": 10_000},
             "metadata": {"type": ["object", "null"],
                          "description": "free-form (at most 1 MB); not part of the dataset version"},
             "cases": _CASES,
         }},
    ],
}
