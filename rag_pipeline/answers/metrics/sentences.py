"""Chinese and English sentence splitting that keeps citation markers with their sentence."""

from __future__ import annotations

import re

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_ITEM = rf"(?:{_UUID}|\d{{1,4}})"
_LIST = rf"\s*{_ITEM}(?:\s*[,，、;；]\s*{_ITEM})*\s*"
MARKER = re.compile(rf"\[(?P<square>{_LIST})\]|【(?P<lenticular>{_LIST})】")
"""One inline citation marker; its group holds the numbers / uuids it cites."""
_ITEM_RE = re.compile(_ITEM)
ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "mr.", "mrs.", "ms.", "dr.", "prof.", "no.", "fig.", "approx.")
_END = re.compile(
    r"(?:[。！？!?；…]+|\.+(?=\s|$|\[|【))"  # a terminator run, or periods before space / marker / end
    r"[”’\"'）)」』》]*"  # closing quotes and brackets
    rf"(?:\s*(?:{MARKER.pattern}))*"  # the markers that follow
    r"|\n+"
)


def marker_items(text: str) -> list[str]:
    """Every number or uuid the inline markers of ``text`` cite, in order (numbers as digit strings)."""
    items: list[str] = []
    for match in MARKER.finditer(text):
        items.extend(_ITEM_RE.findall(match.group("square") or match.group("lenticular")))
    return items


def has_marker(text: str) -> bool:
    """Whether ``text`` holds at least one inline citation marker."""
    return MARKER.search(text) is not None


def strip_markers(text: str) -> str:
    """``text`` without its inline citation markers."""
    return MARKER.sub(" ", text)


def _is_abbreviation(text: str, end: int) -> bool:
    head = text[:end].lower()
    return any(head.endswith(abbr) and (len(head) == len(abbr) or not head[-len(abbr) - 1].isalnum())
               for abbr in ABBREVIATIONS)


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, stripped, empty ones dropped; markers stay with the sentence they follow."""
    sentences: list[str] = []
    start = 0
    for match in _END.finditer(text):
        if text[match.start()] == "." and _is_abbreviation(text, match.start() + 1):
            continue
        piece = text[start:match.end()].strip()
        start = match.end()
        if not piece:
            continue
        if sentences and not strip_markers(piece).strip():
            sentences[-1] = f"{sentences[-1]} {piece}"  # markers alone on a line: the previous sentence's
        else:
            sentences.append(piece)
    tail = text[start:].strip()
    if tail:
        if sentences and not strip_markers(tail).strip():
            sentences[-1] = f"{sentences[-1]} {tail}"
        else:
            sentences.append(tail)
    return sentences
