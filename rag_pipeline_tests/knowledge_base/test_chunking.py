"""Sentence-aware chunking: exact spans, sizes, overlap, coverage, Chinese, long sentences, deterministic ids."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.chunking import Chunk, chunk_text, whole_document

ENGLISH = "\n\n".join(
    " ".join(
        f"Paragraph {p} sentence {s} explains how the travel policy handles item {p * 10 + s}."
        for s in range(6)
    )
    for p in range(5)
)

CHINESE = "".join(
    f"差旅报销需要在出差结束后{i + 1}天内提交。"
    if i % 4 == 0 else
    f"第{i}条规定适用于所有员工吗？" if i % 4 == 1 else
    f"请务必保留原始发票第{i}号！" if i % 4 == 2 else
    f"财务部门会在收到材料后审核第{i}笔费用。"
    for i in range(40)
)
assert " " not in CHINESE

SENTENCE_ENDS_ZH = "。！？；"


def assert_exact_spans(text: str, chunks: list[Chunk], chunk_size: int) -> None:
    assert chunks, "a non-empty document gives at least one chunk"
    for n, c in enumerate(chunks):
        assert c.ordinal == n
        assert 0 <= c.char_start < c.char_end <= len(text)
        assert c.content == text[c.char_start:c.char_end]
        assert len(c.content) <= chunk_size
        assert c.content == c.content.strip(), "surrounding whitespace is trimmed"
    starts = [c.char_start for c in chunks]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)


def assert_covers_every_visible_char(text: str, chunks: list[Chunk]) -> None:
    covered = [False] * len(text)
    for c in chunks:
        for i in range(c.char_start, c.char_end):
            covered[i] = True
    missing = [i for i, ch in enumerate(text) if not ch.isspace() and not covered[i]]
    assert not missing, f"characters not in any chunk at offsets {missing[:10]}"


@pytest.mark.parametrize(("text", "size", "overlap"), [(ENGLISH, 300, 100), (CHINESE, 80, 30), (CHINESE, 120, 0)])
def test_spans_sizes_and_coverage(text: str, size: int, overlap: int) -> None:
    chunks = chunk_text(text, size, overlap)
    assert len(chunks) > 3
    assert_exact_spans(text, chunks, size)
    assert_covers_every_visible_char(text, chunks)


def test_english_chunks_overlap_and_end_at_sentence_boundaries() -> None:
    chunks = chunk_text(ENGLISH, 300, 100)
    # Every sentence is ~85 characters, so at least one whole sentence fits in the overlap.
    for prev, nxt in zip(chunks, chunks[1:]):
        assert nxt.char_start < prev.char_end, f"no overlap between chunk {prev.ordinal} and {nxt.ordinal}"
        shared = ENGLISH[nxt.char_start:prev.char_end]
        assert shared.strip() and prev.content.endswith(shared.rstrip())
    for c in chunks:
        assert c.content.endswith("."), c.content[-30:]
        assert c.char_start == 0 or ENGLISH[c.char_start - 1].isspace()
        assert c.content[0].isupper()


def test_chinese_sentence_boundaries_respected_and_overlap() -> None:
    chunks = chunk_text(CHINESE, 80, 30)
    for c in chunks:
        assert c.content[-1] in SENTENCE_ENDS_ZH, c.content
        assert c.char_start == 0 or CHINESE[c.char_start - 1] in SENTENCE_ENDS_ZH, c.content
    for prev, nxt in zip(chunks, chunks[1:]):
        assert nxt.char_start < prev.char_end, f"no overlap between chunk {prev.ordinal} and {nxt.ordinal}"


def test_zero_overlap_means_adjacent_chunks() -> None:
    chunks = chunk_text(CHINESE, 120, 0)
    for prev, nxt in zip(chunks, chunks[1:]):
        assert nxt.char_start == prev.char_end


def test_english_sentence_longer_than_chunk_size_is_split_at_spaces() -> None:
    long_sentence = " ".join(f"word{i:03d}" for i in range(120)) + "."  # ~960 chars, no sentence end inside
    text = f"Short intro. {long_sentence} Short outro."
    chunks = chunk_text(text, 100, 20)
    assert_exact_spans(text, chunks, 100)
    assert_covers_every_visible_char(text, chunks)
    assert len(chunks) >= 9
    for c in chunks:
        # split at spaces: no word is cut in half
        assert c.char_start == 0 or text[c.char_start - 1] == " "
        assert c.char_end == len(text) or text[c.char_end] == " "


def test_chinese_sentence_longer_than_chunk_size_is_split_anywhere() -> None:
    text = "向量检索" * 60 + "。短句。"  # 240 CJK characters without a boundary, no spaces
    chunks = chunk_text(text, 50, 10)
    assert_exact_spans(text, chunks, 50)
    assert_covers_every_visible_char(text, chunks)
    assert len(chunks) >= 5
    assert max(len(c.content) for c in chunks) == 50


def test_short_text_is_one_chunk_and_blank_text_none() -> None:
    assert chunk_text("  Hello world.  ", 100, 10) == [Chunk(0, 2, 14, "Hello world.")]
    assert chunk_text("", 100, 10) == []
    assert chunk_text(" \n\t \n", 100, 10) == []


@pytest.mark.parametrize(("size", "overlap"), [(19, 0), (0, 0), (-5, 0), (100, -1), (100, 50), (100, 60), (40, 20)])
def test_parameter_validation(size: int, overlap: int) -> None:
    with pytest.raises(ValueError, match="chunk_size|chunk_overlap"):
        chunk_text(ENGLISH, size, overlap)


def test_parameter_boundaries_accepted() -> None:
    assert chunk_text(ENGLISH, 20, 0)
    assert chunk_text(ENGLISH, 100, 49)


def test_whole_document() -> None:
    text = "\n  Title line\n\nBody text. 第二句。  \n"
    [c] = whole_document(text)
    assert c.ordinal == 0
    assert c.content == "Title line\n\nBody text. 第二句。"
    assert c.content == text[c.char_start:c.char_end]
    assert whole_document("   \n ") == []
    assert whole_document(ENGLISH)[0].content == ENGLISH  # no size limit


def test_deterministic_ids() -> None:
    a = chunk_text(CHINESE, 80, 30)
    b = chunk_text(CHINESE, 80, 30)
    assert a == b
    ids = [chunking.chunk_id("kb", "policies/travel.md", c) for c in a]
    assert ids == [chunking.chunk_id("kb", "policies/travel.md", c) for c in b]
    assert len(set(ids)) == len(ids)
    assert all(isinstance(i, uuid.UUID) and i.version == 5 for i in ids)
    # a fixed value: the same corpus gives the same ids on every machine and in every version
    assert chunking.chunk_id("demo", "a.md", Chunk(0, 0, 5, "hello")) == uuid.uuid5(
        chunking.ID_NAMESPACE, "chunk\x1fdemo\x1fa.md\x1f0:5\x1f" + chunking.sha256("hello"))

    c = a[1]
    base = chunking.chunk_id("kb", "policies/travel.md", c)
    assert chunking.chunk_id("kb2", "policies/travel.md", c) != base
    assert chunking.chunk_id("kb", "policies/travel-2.md", c) != base
    changed = Chunk(c.ordinal, c.char_start, c.char_end, c.content[:-1] + "？")
    assert chunking.chunk_id("kb", "policies/travel.md", changed) != base
    moved = Chunk(c.ordinal, c.char_start + 1, c.char_end + 1, c.content)
    assert chunking.chunk_id("kb", "policies/travel.md", moved) != base

    assert chunking.knowledge_base_id("kb") == chunking.knowledge_base_id("kb")
    assert chunking.knowledge_base_id("kb") != chunking.knowledge_base_id("kb2")
    assert chunking.document_id("kb", "a.md") == chunking.document_id("kb", "a.md")
    assert chunking.document_id("kb", "a.md") != chunking.document_id("kb2", "a.md")
    assert chunking.document_id("kb", "a.md") != chunking.document_id("kb", "b.md")


def test_content_change_changes_only_affected_chunk_ids() -> None:
    edited = ENGLISH.replace("item 42.", "item 4242.")
    assert edited != ENGLISH
    before = {chunking.chunk_id("kb", "d.md", c) for c in chunk_text(ENGLISH, 300, 100)}
    after = {chunking.chunk_id("kb", "d.md", c) for c in chunk_text(edited, 300, 100)}
    assert before & after, "chunks before the edit keep their ids"
    assert after - before, "the edited chunk gets a new id"


ROASTING = ("# Coffee Roasting\n\n## Light roasts\n"
            "Light roasts are taken off the heat just after the first crack, so they keep more of the origin flavour "
            "and acidity of the bean. Medium roasts are sweeter.")
ROASTING_ZH = ("# 咖啡烘焙\n\n浅度烘焙在第一次爆裂之后不久就停止加热，因此保留了更多产地风味和酸度，"
               "适合手冲。中度烘焙更甜。")


def _only_headings(chunk: Chunk) -> bool:
    return all(line.lstrip().startswith("#") for line in chunk.content.splitlines() if line.strip())


@pytest.mark.parametrize(("text", "size", "overlap"), [(ROASTING, 150, 20), (ROASTING, 60, 10), (ROASTING_ZH, 30, 0)])
def test_a_heading_alone_joins_the_text_that_follows(text: str, size: int, overlap: int) -> None:
    chunks = chunk_text(text, size, overlap)
    assert not [c.content for c in chunks if _only_headings(c)]
    assert chunks[0].content.startswith(text.split("\n")[0]) and not _only_headings(chunks[0])
    assert_exact_spans(text, chunks, size)
    assert_covers_every_visible_char(text, chunks)


def test_headings_with_room_left_and_hashtags_are_unchanged() -> None:
    text = "Intro sentence here.\n# Usage\nRun it.\n#hashtag alone\nMore text follows here."
    assert [c.content for c in chunk_text(text, 40, 0)] == ["Intro sentence here.\n# Usage\nRun it.",
                                                            "#hashtag alone\nMore text follows here."]
    assert [c.content for c in chunk_text("# Only a heading", 20, 0)] == ["# Only a heading"], "nothing to join"


_PIECES = st.sampled_from(list("abc xyz.!?。！？；\n报销出差政策")
                          + ["  ", ". ", "\n\n", "word ", "\t", "\n# h\n", "## "])


@settings(max_examples=150, deadline=None, database=None)
@given(text=st.lists(_PIECES, max_size=400).map("".join), size=st.integers(20, 120), overlap_frac=st.floats(0, 0.49))
def test_invariants_hold_for_arbitrary_text(text: str, size: int, overlap_frac: float) -> None:
    overlap = min(int(size * overlap_frac), size // 2 - 1)
    chunks = chunk_text(text, size, overlap)
    if text.strip():
        assert_exact_spans(text, chunks, size)
        assert_covers_every_visible_char(text, chunks)
    else:
        assert chunks == []
