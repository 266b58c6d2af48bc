"""Labels that are an external system's own ids in a dataset file of an ``external`` or ``attached`` knowledge
base (docs/evaluating.md, "Chunk catalogue"): before validation, each relevant id that is not a UUID is replaced by
the chunk UUID a run or a qrels import of that id stores (its uuid5, :func:`~rag_pipeline.storage.ids.
external_chunk_uuid`), and the original remembered. On a knowledge base of the project's own nothing is mapped, so
the validator refuses such an id as before."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from rag_pipeline.contracts.dataset import UUID_PATTERN, visible_text
from rag_pipeline.evaluation.datasets.strict_json import JsonObject
from rag_pipeline.storage.ids import external_chunk_uuid

FIELD = "relevant_chunk_ids"
_UUID = re.compile(UUID_PATTERN)
Mapper = Callable[[str], str | None]
"""A label → its chunk UUID, or None to leave it as written (a UUID, or nothing to map)."""
KINDS = ("external", "attached")
"""The kinds of knowledge base whose labels may be the external system's own ids."""


def mapper(kb_name: str, remembered: dict[str, str]) -> Mapper:
    """The mapping of knowledge base ``kb_name``'s labels; each mapped id lands in ``remembered`` (chunk UUID →
    original id)."""
    def to_chunk(raw: str) -> str | None:
        if _UUID.fullmatch(raw) or not visible_text(raw) or "\x00" in raw:
            return None
        chunk = str(external_chunk_uuid(kb_name, raw)[0])
        remembered[chunk] = raw
        return chunk
    return to_chunk


def _like(original: Any, items: dict) -> dict:
    """A copy of the JSON object ``original`` holding ``items``, keeping the keys it saw twice."""
    out = JsonObject(items)
    out.duplicate_keys = getattr(original, "duplicate_keys", ())
    return out


def _map(value: Any, to_chunk: Mapper) -> Any:
    return (to_chunk(value) or value) if isinstance(value, str) else value


def _case(case: Any, to_chunk: Mapper) -> Any:
    if not isinstance(case, dict):
        return case
    items = dict(case)
    value = case.get(FIELD)
    if isinstance(value, list):
        items[FIELD] = [_map(v, to_chunk) for v in value]
    elif isinstance(value, dict):
        graded: dict[str, Any] = {}
        for key, grade in value.items():
            mapped = to_chunk(key) or key
            graded[key if mapped in graded else mapped] = grade  # a clash keeps the id for the validator to name
        items[FIELD] = _like(value, graded)
    judgments = case.get("judgments")
    if isinstance(judgments, list):
        items["judgments"] = [_like(j, {**j, "chunk_id": _map(j.get("chunk_id"), to_chunk)})
                              if isinstance(j, dict) else j for j in judgments]
    return _like(case, items)


def map_labels(data: Any, to_chunk: Mapper) -> Any:
    """``data`` (a dataset file's object or bare array) with every case's non-UUID relevant ids mapped."""
    if isinstance(data, list):
        return [_case(c, to_chunk) for c in data]
    if isinstance(data, dict) and isinstance(data.get("cases"), list):
        return _like(data, {**data, "cases": [_case(c, to_chunk) for c in data["cases"]]})
    return data


def knowledge_base_named(data: Any, knowledge_base: str | None) -> str | None:
    """The knowledge base a dataset document is of: ``knowledge_base``, else the file's own field."""
    if knowledge_base:
        return knowledge_base
    named = data.get("knowledge_base") if isinstance(data, dict) else None
    return named if isinstance(named, str) else None
