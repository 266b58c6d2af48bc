"""Identifiers as the database stores them: chunk, document, knowledge-base and run ids are UUIDs."""

from __future__ import annotations

import uuid
from collections.abc import Iterable


def as_uuid(value: object) -> uuid.UUID | None:
    """``value`` as a UUID (surrounding white space ignored), or ``None`` when it is not one."""
    try:
        return uuid.UUID(str(value).strip())
    except (ValueError, AttributeError, TypeError):
        return None


def uuid_strings(values: Iterable[object]) -> list[str]:
    """The values that are UUIDs, in canonical form, sorted and distinct (anything else cannot be a stored id)."""
    return sorted({str(u) for u in map(as_uuid, values) if u is not None})
