"""One line of a ``.jsonl`` document file, parsed and checked strictly: nothing is coerced.

A line is a JSON object with an ``id`` (or ``_id``: a non-empty string or an integer, at most :data:`MAX_ID_CHARS`
characters, no control character), a ``text`` and an optional ``title`` (strings without lone surrogates); other
fields are ignored, so an unreadable number in one is harmless. Every problem is a :class:`LineError` naming the
field, which the caller prefixes with ``file:line``."""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Literal, overload

MAX_ID_CHARS = 512
"""The longest document id of a ``.jsonl`` line (characters, an integer's digits included)."""

_MAX_INT_CHARS = 4000  # below Python's int-conversion limit (4300 digits)
_SURROGATE = re.compile("[\ud800-\udfff]")


class LineError(ValueError):
    """A problem with one line; ``str`` is the problem, naming the field, without the file and line."""


class _Unconverted(str):
    """A number the line holds but that is not stored as one: too long, or NaN/Infinity."""


def parse_line(line: str) -> dict:
    """The JSON object of ``line``; :class:`LineError` for invalid JSON, another value or too deep a nesting."""
    try:
        obj = json.loads(line, parse_int=_int, parse_constant=_Unconverted)
    except json.JSONDecodeError as exc:
        raise LineError(f"invalid JSON ({exc.msg} at character {exc.pos})") from None
    except RecursionError:
        raise LineError(f"{_deep_field(line)}: nested too deeply to parse") from None
    if not isinstance(obj, dict):
        raise LineError(f"each line must be a JSON object, not {_kind(obj)}")
    return obj


def document_id(obj: dict) -> str:
    """The line's id as text (an integer as its digits)."""
    field = "id" if "id" in obj else "_id"
    value = obj.get(field)
    if value is None:
        raise LineError("each line needs an 'id' (or '_id') and a string 'text'")
    if isinstance(value, _Unconverted | bool) or not isinstance(value, str | int):
        raise LineError(f"'{field}' must be a string or an integer, not {_kind(value)}")
    text = str(value)
    if len(text) > MAX_ID_CHARS:
        raise LineError(f"'{field}' has {len(text):,} characters; the limit is {MAX_ID_CHARS}")
    if not text.strip():
        raise LineError(f"'{field}' is empty")
    for ch in text:
        if unicodedata.category(ch) in ("Cc", "Cs"):
            what = "a lone surrogate" if unicodedata.category(ch) == "Cs" else "the control character"
            raise LineError(f"'{field}' contains {what} {ascii(ch)[1:-1]}")
    return text


@overload
def string_field(obj: dict, field: str) -> str: ...
@overload
def string_field(obj: dict, field: str, *, optional: Literal[True]) -> str | None: ...
def string_field(obj: dict, field: str, *, optional: bool = False) -> str | None:
    """``obj[field]`` if it is a string without a lone surrogate (``None`` when ``optional`` and absent/null)."""
    value = obj.get(field)
    if value is None and optional:
        return None
    if isinstance(value, _Unconverted) or not isinstance(value, str):
        need = "a string or null" if optional else "a string"
        raise LineError(f"'{field}' must be {need}, not {_kind(value)}")
    if bad := _SURROGATE.search(value):
        raise LineError(f"'{field}' contains a lone surrogate ({ascii(bad.group())[1:-1]} at character "
                        f"{bad.start()}), which is not Unicode text")
    return value


def _int(digits: str) -> int | _Unconverted:
    return _Unconverted(digits) if len(digits) > _MAX_INT_CHARS else int(digits)


def _kind(value: object) -> str:
    if value is None:
        return "null (or missing)"
    if isinstance(value, _Unconverted):
        return str(value) if not value.lstrip("-").isdigit() else f"a number of {len(value.lstrip('-')):,} digits"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, str):
        return "a string"
    return "an object" if isinstance(value, dict) else "a list"


def _deep_field(line: str) -> str:
    """The top-level field whose value is nested too deeply, e.g. ``'extra'`` (or ``the line``)."""
    depth, key, in_string, escaped, start = 0, None, False, False, 0
    for i, ch in enumerate(line):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
                if depth == 1:
                    key = line[start:i]
        elif ch == '"':
            in_string, start = True, i + 1
        elif ch in "[{":
            depth += 1
            if depth > 500:
                break
        elif ch in "]}":
            depth -= 1
    return f"{ascii(key)[1:-1]!r}" if key is not None and depth > 1 else "the line"
