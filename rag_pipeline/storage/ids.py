"""Identifiers as the database stores them: chunk, document, knowledge-base and run ids are UUIDs."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable

EXTERNAL_ID_NAMESPACE = uuid.UUID("5b0d7e3c-2f4e-5d55-9a61-7c1f0e8a4b21")
"""The uuid5 namespace of external document ids (fixed: the same docno maps to the same UUID everywhere)."""
_CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def as_uuid(value: object) -> uuid.UUID | None:
    """``value`` as a UUID (surrounding white space ignored), or ``None`` when it is not one."""
    try:
        return uuid.UUID(str(value).strip())
    except (ValueError, AttributeError, TypeError):
        return None


def uuid_strings(values: Iterable[object]) -> list[str]:
    """The values that are UUIDs, in canonical form, sorted and distinct (anything else cannot be a stored id)."""
    return sorted({str(u) for u in map(as_uuid, values) if u is not None})


def chunk_key(prefix: bytes, docno: str) -> tuple[str, bool]:
    """The chunk UUID of an external id (a TREC docno, an HTTP retriever's or an attached table's chunk id) as text
    (``prefix``: :func:`key_prefix`): a canonical UUID is itself, any other id the 32 hex digits of its uuid5."""
    if len(docno) == 36 and _CANONICAL.fullmatch(docno):
        return docno, False
    digest = bytearray(hashlib.sha1(prefix + docno.encode("utf-8")).digest()[:16])  # uuid5, as uuid.uuid5
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    return digest.hex(), True


def key_prefix(knowledge_base: str) -> bytes:
    return EXTERNAL_ID_NAMESPACE.bytes + f"{knowledge_base}\x1f".encode()


def external_chunk_uuid(knowledge_base: str, external_id: str) -> tuple[uuid.UUID, bool]:
    """The chunk UUID of ``external_id`` in ``knowledge_base`` and whether it is derived: a canonical (lower-case,
    hyphenated) UUID is itself; any other id is ``uuid5(EXTERNAL_ID_NAMESPACE, "<knowledge base>\\x1f<id>")``."""
    key, derived = chunk_key(key_prefix(knowledge_base), external_id)
    return uuid.UUID(key), derived
