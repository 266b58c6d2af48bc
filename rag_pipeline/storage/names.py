"""The one name rule (:func:`check_name`, stated by :func:`name_rule`; docs/design.md §2.4) for knowledge bases,
datasets and strategy versions, and :func:`printable`, terminal-safe text for every user-supplied string."""

from __future__ import annotations

import unicodedata

from rag_pipeline.contracts.errors import BadInputError

MAX_NAME_CHARS = 100
MAX_DATASET_NAME_CHARS = 200
NAME_PUNCTUATION = "._-"

KNOWLEDGE_BASE = "knowledge base"
DATASET = "dataset"
STRATEGY_VERSION = "strategy version"

# kind -> (max characters, extra allowed characters, banned substrings)
_KINDS: dict[str, tuple[int, str, tuple[str, ...]]] = {
    KNOWLEDGE_BASE: (MAX_NAME_CHARS, "", ()),
    STRATEGY_VERSION: (MAX_NAME_CHARS, "", ()),
    DATASET: (MAX_DATASET_NAME_CHARS, "@", ("...",))}

_SHOWN_CHARS = 80
_BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}


class InvalidNameError(BadInputError, ValueError):
    """A knowledge base, dataset or strategy version name that breaks the name rule; the message says why."""

    def __init__(self, kind: str, value: str, reason: str):
        self.kind, self.value, self.reason = kind, value, reason
        super().__init__(f"invalid {kind} name {show_name(value)}: {reason}; {name_rule(kind)}")


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _unprintable(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp") or ord(ch) in _BIDI


def printable(text: object, *, keep: str = "") -> str:
    """``text`` with every control character escaped (``\\x1b``, ``\\u2028``...), except those in ``keep``
    (e.g. ``"\\n"`` for a multi-line message); printable characters, CJK included, are kept as they are."""
    text = str(text)
    if not any(_unprintable(ch) for ch in text):
        return text
    return "".join(_escape(ch) if _unprintable(ch) and ch not in keep else ch for ch in text)


def show_name(value: object) -> str:
    """A name for a message: quoted, control characters escaped, cut after 80 characters."""
    text = str(value)
    cut = text[:_SHOWN_CHARS] + ("…" if len(text) > _SHOWN_CHARS else "")
    return "'" + printable(cut) + "'"


def name_rule(kind: str) -> str:
    """The rule as one sentence, for messages and docs."""
    limit, extra, banned = _KINDS.get(kind, _KINDS[KNOWLEDGE_BASE])
    allowed = "'.', '_', '-'" + "".join(f", '{ch}'" for ch in extra)
    tail = "".join(f", without '{b}'" for b in banned)
    return (f"a {kind} name has 1 to {limit} characters: letters (any script), digits, {allowed}, "
            f"not starting with '.' or '-'{tail}")


def _reason(value: str, limit: int, extra: str, banned: tuple[str, ...]) -> str | None:
    if not value:
        return "it is empty"
    if len(value) > limit:
        return f"it has {len(value)} characters; the limit is {limit}"
    for i, ch in enumerate(value):
        if ch.isalnum() or ch in NAME_PUNCTUATION or ch in extra:
            continue
        if i and unicodedata.category(ch).startswith("M"):  # a combining mark (Devanagari, Thai vowel signs)
            continue
        if "\ud800" <= ch <= "\udfff":
            return "it is not valid UTF-8/Unicode (an undecodable byte in a file name?)"
        if ch in "/\\":
            return "it contains a path separator"
        if _unprintable(ch) or unicodedata.category(ch).startswith("C"):
            return f"it contains the control character {_escape(ch)}"
        if ch.isspace():
            return "it contains whitespace"
        return f"it contains {ch!r}" if ch.isprintable() else f"it contains {_escape(ch)}"
    if value.startswith("."):
        return "it starts with '.'"
    if value.startswith("-"):
        return "it starts with '-' (it would read as a command-line option)"
    for bad in banned:
        if bad in value:
            return f"it contains {bad!r}"
    return None


def check_name(kind: str, value: object) -> str:
    """``value`` if it is a valid ``kind`` name (:data:`KNOWLEDGE_BASE`, :data:`DATASET`,
    :data:`STRATEGY_VERSION`), else :class:`InvalidNameError` naming the kind, the (escaped) value and why."""
    if not isinstance(value, str):
        raise InvalidNameError(kind, repr(value), f"it must be a string, got {type(value).__name__}")
    if reason := _reason(value, *_KINDS.get(kind, _KINDS[KNOWLEDGE_BASE])):
        raise InvalidNameError(kind, value, reason)
    return value


def is_valid_name(kind: str, value: object) -> bool:
    return isinstance(value, str) and _reason(value, *_KINDS.get(kind, _KINDS[KNOWLEDGE_BASE])) is None
