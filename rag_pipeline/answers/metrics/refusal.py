"""Whether an answer is a refusal: its own flag, else a zh/en phrase list (docs/design.md §12.4)."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from functools import lru_cache

from rag_pipeline.contracts.answers import AnswerRecord, RefusalSource

DEFAULT_REFUSAL_PHRASES: tuple[str, ...] = (
    # Chinese
    "信息不足", "无法回答", "没有相关信息", "无法确定", "未提及", "没有提及", "没有提到", "无法得知", "无从得知",
    "不知道", "无法提供", "资料中没有", "文档中没有", "上下文中没有", "没有足够的信息", "找不到相关",
    # English
    "i don't know", "i do not know", "insufficient information", "not enough information", "cannot answer",
    "can't answer", "unable to answer", "no relevant information", "does not contain information",
    "doesn't contain information", "not mentioned in the", "no information about", "cannot be determined",
    "i'm not sure", "i am not sure",
)
"""The documented default list (docs/design.md §12.4); an answer run's :class:`AnswerScoring` may replace it."""

_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201b": "'", "\u2032": "'", "\u00b4": "'",
                         "\u201c": '"', "\u201d": '"', "\u201f": '"', "\u2033": '"'})


def normalise_for_refusal(text: str) -> str:
    """NFKC, case-folded, curly quotes straight, white space collapsed to one space."""
    return " ".join(unicodedata.normalize("NFKC", text).translate(_QUOTES).casefold().split())


def phrase_refusal(answer: str, phrases: Sequence[str] | None = None) -> bool:
    """Whether the normalised answer contains a normalised phrase (default :data:`DEFAULT_REFUSAL_PHRASES`)."""
    text = normalise_for_refusal(answer)
    return any(needle in text for needle in _needles(DEFAULT_REFUSAL_PHRASES if phrases is None else tuple(phrases)))


@lru_cache(maxsize=64)
def _needles(phrases: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n for n in map(normalise_for_refusal, phrases) if n)


def is_refusal(record: AnswerRecord, phrases: Sequence[str] | None = None) -> tuple[bool, RefusalSource]:
    """``(refused, source)``: the record's own flag if sent, else ``(True, "phrase")`` on a match, else none."""
    if record.refused is not None:
        return record.refused, "flag"
    if phrase_refusal(record.answer, phrases):
        return True, "phrase"
    return False, "none"
