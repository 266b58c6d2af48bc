"""The datasets stored for a knowledge base: listing them, finding a version, storing an upload."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from rag_pipeline.contracts.catalog import DatasetInfo, DatasetVersion, UploadResult
from rag_pipeline.evaluation.datasets import queries as dataset_queries
from rag_pipeline.evaluation.datasets.label_check import relevant_ids_missing
from rag_pipeline.evaluation.datasets.load import (
    MAX_FILE_BYTES,
    DatasetError,
    DatasetProblem,
    parse_dataset,
    validate_dataset,
)
from rag_pipeline.evaluation.datasets.resolve import stored_version
from rag_pipeline.evaluation.datasets.strict_json import JsonObject, JsonReadError, ScanLimitError, decode_json
from rag_pipeline.evaluation.runs.results import store_dataset
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseRef, resolve_knowledge_base


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def list_datasets(engine: sa.Engine, knowledge_base: str) -> list[DatasetInfo]:
    """The datasets stored for a knowledge base, by name: the latest version, version and run counts, dates."""
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
        rows = dataset_queries.latest_versions(conn, kb.name)
    return [DatasetInfo(name=r.name, knowledge_base=kb.name, dataset_id=str(r.id), version=r.content_hash,
                        case_count=r.case_count, source_path=r.source_path, versions=r.versions, runs=r.runs,
                        created_at=_iso(r.created_at), last_seen_at=_iso(r.last_seen_at),
                        last_run_at=_iso(r.last_run_at)) for r in rows]


def find_dataset(engine: sa.Engine, knowledge_base: str | KnowledgeBaseRef, name: str,
                 version: str | None = None) -> DatasetVersion:
    """A stored version of dataset ``name``: the latest, or the one whose hash starts with ``version``."""
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
        r = stored_version(conn, kb, name, version)
    return DatasetVersion(dataset_id=str(r.id), name=r.name, version=r.content_hash, case_count=r.case_count,
                          knowledge_base=kb.name)


def store_uploaded_dataset(engine: sa.Engine, knowledge_base: str, raw: bytes | str | dict, *, source: str,
                           name: str | None = None, default_name: str | None = None) -> UploadResult:
    """Validate dataset bytes exactly like a file, then store the version as ``name`` or ``default_name``."""
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
    fallback = None if name else default_name or _field_name(raw)
    unnamed = [] if name or fallback else [DatasetProblem(
        "the dataset has no name: give a `name` field, or name the upload (`name` form field or `?name=`)",
        field="name")]
    try:
        if isinstance(raw, dict):  # already read strictly
            dataset = validate_dataset(raw, source=source, knowledge_base=kb.name, name=name, default_name=fallback)
        else:
            dataset = parse_dataset(raw, source=source, knowledge_base=kb.name, name=name, default_name=fallback)
    except DatasetError as exc:
        raise DatasetError(exc.source, [*unnamed, *exc.problems], more=exc.more) from None
    if unnamed:
        raise DatasetError(source, unnamed)
    with engine.begin() as conn:
        existed = dataset_queries.version_exists(conn, dataset.name, kb.name, dataset.content_hash)
        dataset_id = store_dataset(conn, dataset, kb.name)
        missing = relevant_ids_missing(conn, kb.id, dataset)
    ks = [c.k for c in dataset.cases]
    return UploadResult(dataset_id=str(dataset_id), name=dataset.name, version=dataset.content_hash,
                        case_count=len(dataset.cases), knowledge_base=kb.name,
                        relevant_ids=sum(len(c.relevant_chunk_ids) for c in dataset.cases),
                        relevant_ids_not_in_kb=missing, k_min=min(ks), k_max=max(ks), created=not existed)


def store_inline_cases(engine: sa.Engine, knowledge_base: str, body: bytes, name: str) -> UploadResult:
    """Store the ``cases`` of a JSON request body as a version of dataset ``name``, read strictly like a file."""
    try:
        data = decode_json(body, MAX_FILE_BYTES)
    except JsonReadError as exc:
        raise DatasetError("request body", [DatasetProblem(str(exc))]) from None
    except ScanLimitError as exc:
        raise DatasetError("request body", [DatasetProblem(str(exc), field="cases")]) from None
    cases = data.get("cases") if isinstance(data, dict) else None
    return store_uploaded_dataset(engine, knowledge_base, JsonObject(cases=cases), source="request body",
                                  name=name)


def _field_name(raw: bytes | str | dict) -> str | None:
    """The usable ``name`` of an object-form dataset (else None), read through the bounded reader."""
    try:
        data = raw if isinstance(raw, dict) else decode_json(raw, MAX_FILE_BYTES)
    except (JsonReadError, ScanLimitError):
        return None
    value = data.get("name") if isinstance(data, dict) else None
    return value if isinstance(value, str) and value else None
