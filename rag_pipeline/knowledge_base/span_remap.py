"""Re-map a chunk id to the current chunks of a knowledge base by document span (labels across re-chunkings).

The rule is docs/labelling.md's: the passage of the old (retired) chunk is found in the current text of the
document of the same name (at the old span, else at its only occurrence); each current chunk overlapping it is a
candidate with its overlap fraction; :func:`decide` re-maps only when exactly one covers at least
:data:`AUTO_OVERLAP` of the old span."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import sqlalchemy as sa

from rag_pipeline.knowledge_base.chunk_lookup import ChunkRow, chunks_by_ids
from rag_pipeline.knowledge_base.queries import chunks as queries
from rag_pipeline.storage.ids import as_uuid

AUTO_OVERLAP = 0.5


@dataclass(frozen=True)
class SpanCandidate:
    chunk_id: str
    ordinal: int
    char_start: int
    char_end: int
    overlap: float  # overlapping characters / characters of the old span, 0..1

    def as_dict(self) -> dict:
        return {"chunk_id": self.chunk_id, "ordinal": self.ordinal, "char_start": self.char_start,
                "char_end": self.char_end, "overlap": round(self.overlap, 4)}


@dataclass(frozen=True)
class SpanRemap:
    """Where one old chunk's passage is in the target knowledge base. ``problem`` set: it cannot be located."""

    old: ChunkRow | None
    document_name: str | None = None
    span: tuple[int, int] | None = None
    located: str = ""  # how the span was found ("same span", "passage moved to chars a-b")
    candidates: tuple[SpanCandidate, ...] = field(default_factory=tuple)
    problem: str | None = None


def remap_by_span(conn: sa.Connection, target_kb_id, old_ids: Iterable[str]) -> dict[str, SpanRemap]:
    """For each old chunk id, its passage located in the target knowledge base's current chunks."""
    old_ids = list(old_ids)
    old = chunks_by_ids(conn, old_ids)
    names = sorted({c.document_name for c in old.values()})
    docs = {r.original_name: r for r in queries.named_documents(conn, target_kb_id, names)}
    chunks: dict[str, list] = {}
    if docs:
        for r in queries.current_spans(conn, [d.id for d in docs.values()]):
            chunks.setdefault(str(r.document_id), []).append(r)
    out: dict[str, SpanRemap] = {}
    for raw in old_ids:
        chunk = old.get(str(as_uuid(raw)))
        if chunk is None:
            out[raw] = SpanRemap(None, problem="no chunk row has this id (not even a replaced one), so its span is "
                                              "unknown")
            continue
        doc = docs.get(chunk.document_name)
        if doc is None:
            out[raw] = SpanRemap(chunk, chunk.document_name, problem=f"the target knowledge base has no document "
                                 f"{chunk.document_name!r}")
            continue
        if not doc.searchable:
            out[raw] = SpanRemap(chunk, chunk.document_name, problem=f"document {chunk.document_name!r} is not "
                                 "searchable in the target knowledge base (deleted, unpublished or not ready)")
            continue
        found = _locate(chunk, doc.content)
        if isinstance(found, str):
            out[raw] = SpanRemap(chunk, chunk.document_name, problem=found)
            continue
        span, located = found
        out[raw] = SpanRemap(chunk, chunk.document_name, span, located, _candidates(span, chunks.get(str(doc.id), [])))
    return out


def _locate(chunk: ChunkRow, text: str) -> tuple[tuple[int, int], str] | str:
    """``(span, how it was located)`` of the old passage in ``text``, or why it cannot be located."""
    if text[chunk.char_start:chunk.char_end] == chunk.text:
        return (chunk.char_start, chunk.char_end), "same span"
    first = text.find(chunk.text)
    if first < 0:
        return (f"the old passage (chars {chunk.char_start}-{chunk.char_end}) is no longer in document "
                f"{chunk.document_name!r}: its text changed")
    if text.find(chunk.text, first + 1) >= 0:
        return f"the old passage occurs more than once in the changed document {chunk.document_name!r}"
    return (first, first + len(chunk.text)), f"passage moved to chars {first}-{first + len(chunk.text)}"


def _candidates(span: tuple[int, int], rows) -> tuple[SpanCandidate, ...]:
    start, end = span
    length = max(1, end - start)
    found = []
    for r in rows:
        common = min(end, r.char_end) - max(start, r.char_start)
        if common > 0:
            found.append(SpanCandidate(str(r.id), r.ordinal, r.char_start, r.char_end, common / length))
    return tuple(sorted(found, key=lambda c: (-c.overlap, c.char_start, c.chunk_id)))


def decide(remap: SpanRemap) -> tuple[str | None, str]:
    """``(new chunk id, reason)`` when exactly one current chunk covers >= 50 % of the old span, else
    ``(None, why a person must choose)``."""
    if remap.problem:
        return None, remap.problem
    big = [c for c in remap.candidates if c.overlap >= AUTO_OVERLAP]
    if len(big) == 1:
        c = big[0]
        return c.chunk_id, (f"re-mapped by document span ({remap.located}): current chunk #{c.ordinal} "
                            f"(chars {c.char_start}-{c.char_end}) covers {c.overlap:.0%} of the old span")
    if not remap.candidates:
        return None, "no current chunk overlaps the old span"
    if big:
        return None, (f"{len(big)} current chunks each cover >= {AUTO_OVERLAP:.0%} of the old span "
                      "(the old passage sits in their overlap): choose")
    return None, (f"the old span is split over {len(remap.candidates)} current chunks, none covering "
                  f"{AUTO_OVERLAP:.0%} (best {remap.candidates[0].overlap:.0%}): choose the one(s) that answer")
