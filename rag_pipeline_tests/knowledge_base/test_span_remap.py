"""The re-mapping rule of ``fix-labels`` (no database): exactly one current chunk covering >= 50 % of the old span
is taken, anything else is listed with the overlap fractions, never guessed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rag_pipeline.knowledge_base.chunk_lookup import ChunkRow, snippet
from rag_pipeline.knowledge_base.span_remap import SpanRemap, _candidates, _locate, decide

OLD = ChunkRow("old", "doc", "a.md", 3, 100, 200, "x" * 100, is_current=False)


def rows(*spans):
    return [SimpleNamespace(id=f"c{i}", ordinal=i, char_start=s, char_end=e) for i, (s, e) in enumerate(spans)]


def remap(*spans) -> SpanRemap:
    return SpanRemap(OLD, "a.md", (100, 200), "same span", _candidates((100, 200), rows(*spans)))


def test_overlap_is_the_share_of_the_old_span_and_candidates_are_best_first():
    found = remap((0, 130), (130, 260), (300, 400)).candidates
    assert [(c.chunk_id, c.overlap) for c in found] == [("c1", 0.7), ("c0", 0.3)]


@pytest.mark.parametrize(("spans", "new", "why"), [
    (((0, 500),), "c0", "covers 100%"),                                 # a bigger chunk holds the old one
    (((0, 150), (160, 400)), "c0", "covers 50%"),                       # exactly 50 % is enough
    (((0, 150), (150, 400)), None, "2 current chunks each cover"),      # 50 / 50: a person chooses
    (((0, 149), (149, 400)), "c1", "covers 51%"),
    (((0, 180), (120, 400)), None, "2 current chunks each cover"),      # the old span sits in their overlap
    (((0, 130), (130, 160), (160, 400)), None, "split over 3"),         # smaller chunks: a person chooses
    (((300, 400),), None, "no current chunk overlaps"),
])
def test_decide_takes_only_one_chunk_covering_half(spans, new, why):
    chosen, reason = decide(remap(*spans))
    assert chosen == new and why in reason


def test_a_passage_is_located_at_its_span_or_its_only_occurrence():
    text = "a" * 100 + "x" * 100 + "b" * 50
    assert _locate(OLD, text) == ((100, 200), "same span")
    moved = "zz" + text
    assert _locate(OLD, moved)[0] == (102, 202)
    assert "no longer in document" in _locate(OLD, "a" * 300)
    twice = ChunkRow("old", "doc", "a.md", 0, 0, 3, "abc", is_current=False)
    assert "more than once" in _locate(twice, "zabc abc")
    assert decide(SpanRemap(OLD, "a.md", problem="gone"))[0] is None


def test_snippet_is_one_line_cut_around_the_searched_text():
    text = "first line\n" + "word " * 100 + "needle here " + "tail " * 100
    cut = snippet(text, ["Needle"], width=60)
    assert "needle" in cut and cut.startswith("…") and cut.endswith("…") and "\n" not in cut
    assert snippet("short\ntext", []) == "short text"
