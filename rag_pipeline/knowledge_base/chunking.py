"""Sentence-aware chunking with exact character spans, correct for Chinese (no spaces) and English.

Sentences are packed greedily into chunks of at most ``chunk_size`` characters, each chunk repeating about
``chunk_overlap`` characters of whole sentences; a longer sentence is cut at the last space (anywhere for Chinese);
a chunk of only Markdown headings takes in the next sentence (docs/design.md §3.1). Every chunk is
``text[char_start:char_end]`` exactly, whitespace trimmed."""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass

ID_NAMESPACE = uuid.UUID("6c1f0a8e-2b7d-5d43-9c55-6b1e6f3f7a10")

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])|\n\s*")
_HEADING = re.compile(r"[ \t]{0,3}#{1,6}(?:[ \t][^\n]*)?\s*")


@dataclass(frozen=True)
class Chunk:
    ordinal: int
    char_start: int
    char_end: int
    content: str

    @property
    def content_hash(self) -> str:
        return sha256(self.content)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def knowledge_base_id(name: str) -> uuid.UUID:
    return uuid.uuid5(ID_NAMESPACE, f"kb\x1f{name}")


def document_id(kb_name: str, original_name: str) -> uuid.UUID:
    return uuid.uuid5(ID_NAMESPACE, f"doc\x1f{kb_name}\x1f{original_name}")


def chunk_id(kb_name: str, original_name: str, chunk: Chunk) -> uuid.UUID:
    """Deterministic: the same corpus re-ingested anywhere gives the same ids (labels stay valid)."""
    key = f"chunk\x1f{kb_name}\x1f{original_name}\x1f{chunk.char_start}:{chunk.char_end}\x1f{chunk.content_hash}"
    return uuid.uuid5(ID_NAMESPACE, key)


def _sentence_spans(text: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        end = match.end()
        if end > start:
            spans.append((start, end))
        start = end
    if start < len(text):
        spans.append((start, len(text)))
    return spans


def _split_long(text: str, start: int, end: int, size: int) -> list[tuple[int, int]]:
    pieces = []
    while end - start > size:
        cut = text.rfind(" ", start + size // 2, start + size)
        cut = cut + 1 if cut > start else start + size
        pieces.append((start, cut))
        start = cut
    pieces.append((start, end))
    return pieces


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _only_headings(text: str, units: list[tuple[int, int]]) -> bool:
    return all(_HEADING.fullmatch(text, s, e) is not None for s, e in units)


def _join_next(text: str, units: list[tuple[int, int]], i: int, j: int, size: int) -> int:
    """Units ``i..j`` are headings only: the chunk takes unit ``j + 1`` too, or its head up to ``size`` (``units`` is
    updated; the rest starts the next unit). Returns the chunk's new last unit."""
    start, end = units[j + 1]
    limit = units[i][0] + size
    if end <= limit:
        return j + 1
    cut = text.rfind(" ", start + 1, limit)
    cut = cut + 1 if cut > start else limit
    if cut <= start:  # the headings fill the chunk already
        return j
    units[j + 1:j + 2] = [(start, cut), (cut, end)]
    return j + 1


def chunk_text(text: str, chunk_size: int = 500, chunk_overlap: int = 80) -> list[Chunk]:
    """Cut ``text`` into chunks; see the module docstring."""
    if chunk_size < 20:
        raise ValueError(f"chunk_size must be at least 20 characters, got {chunk_size}")
    if not 0 <= chunk_overlap < chunk_size // 2:
        raise ValueError(f"chunk_overlap must be in [0, chunk_size/2), got {chunk_overlap}")
    units: list[tuple[int, int]] = []
    for s, e in _sentence_spans(text):
        units.extend(_split_long(text, s, e, chunk_size))
    chunks: list[Chunk] = []
    i = 0
    while i < len(units):
        j = i
        while j + 1 < len(units) and units[j + 1][1] - units[i][0] <= chunk_size:
            j += 1
        if j + 1 < len(units) and _only_headings(text, units[i:j + 1]):
            j = _join_next(text, units, i, j, chunk_size)
        start, end = _trim(text, units[i][0], units[j][1])
        if end > start:
            chunks.append(Chunk(len(chunks), start, end, text[start:end]))
        if j + 1 >= len(units):
            break
        nxt = j + 1
        while nxt - 1 > i and units[j][1] - units[nxt - 1][0] <= chunk_overlap:
            nxt -= 1
        i = nxt
    return chunks


def whole_document(text: str) -> list[Chunk]:
    """The document as a single chunk (surrounding whitespace trimmed): BEIR imports keep labels exact."""
    start, end = _trim(text, 0, len(text))
    return [Chunk(0, start, end, text[start:end])] if end > start else []
