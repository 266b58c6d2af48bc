"""Reading dataset JSON strictly within limits (docs/design.md §2.2; checked streaming, before decoding), and
reporting its problems (:class:`DatasetError`) with duplicate keys and non-finite numbers located."""

from __future__ import annotations

import io
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import ijson

from rag_pipeline.contracts.dataset import MAX_CASES
from rag_pipeline.contracts.errors import BadInputError

MAX_DECODED_BYTES = 150 * 1024 * 1024
"""The most a dataset may take as Python objects once decoded (estimated while streaming): 3× the 50 MB file
limit, far above any valid dataset, so a hostile file is refused before it is built."""
MAX_UNSCANNED_BYTES = 5 * 1024 * 1024
"""A file the fast parser stops on is decoded by the strict one only up to this size."""

_POINTER = 8
_CONTAINER = {"start_map": 64, "start_array": 56}
_SIZES = {"map_key": _POINTER, "boolean": _POINTER, "null": _POINTER}
# What json.loads accepts and yajl does not, made readable for the count (same length, so nothing else moves).
_NON_FINITE = ((b"-Infinity", b"-12345678"), (b"Infinity", b"12345678"), (b"NaN", b"0.0"))
_LONE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class ScanLimitError(ValueError):
    """A limit was reached while streaming; ``case_index`` is the case being read then (``None``: before any)."""

    def __init__(self, message: str, case_index: int | None = None):
        super().__init__(message)
        self.case_index = case_index


def _readable(raw: bytes) -> bytes:
    for token, stand_in in _NON_FINITE:
        if token in raw:
            raw = raw.replace(token, stand_in)
    if b"\\u" in raw and _LONE_SURROGATE.search(raw):
        raw = _LONE_SURROGATE.sub(rb"\\u0041", raw)
    return raw


def _value_size(event: str, value) -> int:
    if event == "string":
        return _POINTER + (49 + len(value) if len(value) > 1 else 0)
    if event == "number":
        return _POINTER + (0 if isinstance(value, int) and -5 <= value <= 256 else 32)
    return _SIZES.get(event, _POINTER)


def scan_limits(raw: bytes) -> None:
    """Raise :class:`ScanLimitError` if ``raw`` (UTF-8 JSON, BOM removed) holds more than ``MAX_CASES`` cases or
    would decode to more than :data:`MAX_DECODED_BYTES`; return when it is within both, or unreadable here."""
    depth, cases_depth, cases, budget = 0, 0, 0, 0
    pending_cases_key = False  # the last top-level key was "cases"
    try:
        for event, value in ijson.basic_parse(io.BytesIO(_readable(raw)), use_float=True):
            if event in ("end_map", "end_array"):
                if depth == cases_depth:
                    cases_depth = 0
                depth -= 1
                continue
            if depth == cases_depth and cases_depth:  # a new case starts
                cases += 1
                if cases > MAX_CASES:
                    raise ScanLimitError(f"more than {MAX_CASES} cases; the limit is {MAX_CASES} "
                                         f"(stopped reading at cases[{MAX_CASES}])")
            if event == "map_key":
                pending_cases_key = depth == 1 and value == "cases"
                budget += _POINTER
                continue
            if event in _CONTAINER:
                budget += _CONTAINER[event] + _POINTER
                depth += 1
                if event == "start_array" and (depth == 1 or (depth == 2 and pending_cases_key)):
                    cases_depth = depth
            else:
                budget += _value_size(event, value)
            pending_cases_key = False
            if budget > MAX_DECODED_BYTES:
                raise ScanLimitError(
                    f"the JSON would take more than {MAX_DECODED_BYTES // 2**20} MB in memory once decoded (far "
                    "more values than any valid dataset holds; stopped reading there)", cases - 1 if cases else None)
    except (ijson.JSONError, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, ScanLimitError):
            raise
        if len(raw) > MAX_UNSCANNED_BYTES:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ScanLimitError(f"the file is not JSON this reader accepts ({first}); files over "
                                 f"{MAX_UNSCANNED_BYTES // 2**20} MB must be plain JSON") from None


MAX_LISTED_PROBLEMS = 50

_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class DatasetProblem:
    """One validation problem; ``case_index`` is 0-based (``cases[i]`` in the file)."""

    message: str
    field: str | None = None
    case_index: int | None = None
    case_id: str | None = None

    def describe(self, source: str) -> str:
        where = [source]
        if self.case_index is not None:
            where.append(f"cases[{self.case_index}]" + (f" (case_id {self.case_id!r})" if self.case_id else ""))
        if self.field:
            where.append(f"field {self.field!r}")
        return ": ".join(where) + ": " + self.message


class DatasetError(BadInputError, ValueError):
    """A dataset file that cannot be used; ``str()`` lists its problems, one per line. At most
    :data:`MAX_LISTED_PROBLEMS` are kept (``problems``); ``more`` counts the others, so an invalid file of any size
    gives a bounded error (docs/design.md §2.2)."""

    def __init__(self, source: str, problems: list[DatasetProblem], more: int = 0):
        self.source = source
        self.problems = problems[:MAX_LISTED_PROBLEMS]
        self.more = more + max(0, len(problems) - MAX_LISTED_PROBLEMS)
        self.total = len(self.problems) + self.more
        lines = [p.describe(source) for p in self.problems]
        if self.more:
            lines.append(f"... and {self.more} more problems")
        if self.total == 1:  # one problem, one line
            super().__init__(f"invalid dataset {lines[0]}")
            return
        head = f"invalid dataset {source}: {self.total} problems"
        super().__init__("\n".join([head, *("  " + line for line in lines)]))


class JsonReadError(ValueError):
    """The bytes are not a JSON document we can read (encoding, syntax, size)."""


class NonFinite:
    """Stands in for NaN / Infinity / -Infinity (and overflowing numbers) so they are reported, not used."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


class JsonObject(dict):
    duplicate_keys: tuple[str, ...] = ()


def object_hook(pairs: list[tuple[str, Any]]) -> JsonObject:
    obj = JsonObject(pairs)
    if len(obj) != len(pairs):
        counts = Counter(k for k, _ in pairs)
        obj.duplicate_keys = tuple(sorted(k for k, n in counts.items() if n > 1))
    return obj


def parse_float(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) else NonFinite(text)


def type_name(value: Any) -> str:
    if isinstance(value, NonFinite):
        return "non-finite number"
    return {dict: "object", JsonObject: "object", list: "array", str: "string", bool: "boolean",
            int: "integer", float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def got(value: Any, limit: int = 60) -> str:
    """``got <type> <value>`` for a message, with long values cut."""
    if isinstance(value, NonFinite):
        return f"got non-finite number {value.text}"
    if value is None or isinstance(value, (dict, list)):
        return f"got {type_name(value)}"
    return f"got {type_name(value)} {show(value, limit)}"


def show(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "…"


def field_path(loc: tuple) -> str:
    """A pydantic error location as a path: ``questions[2].candidates[0].grade``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def wide_encoding(raw: bytes) -> str | None:
    """``"UTF-32"`` / ``"UTF-16"`` when ``raw`` starts with that encoding's BOM or, without one, with the NUL
    bytes that ASCII JSON has in it (RFC 4627 §3); else ``None``."""
    if raw.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        return "UTF-32"
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16"
    head = raw[:4]
    if len(head) == 4 and (head[:3] == b"\x00\x00\x00" or head[1:] == b"\x00\x00\x00"):
        return "UTF-32"
    if len(head) >= 2 and (head[0] == 0 or head[1] == 0):
        return "UTF-16"
    return None


def decode_json(raw: bytes | str, max_bytes: int) -> Any:
    """Parse dataset bytes (UTF-8, optional BOM) or text; :class:`JsonReadError` says why not,
    :class:`ScanLimitError` which limit the streaming pre-scan reached."""
    if isinstance(raw, bytes):
        if len(raw) > max_bytes:
            raise JsonReadError(f"file is larger than {max_bytes // 1024 // 1024} MB")
        if raw.startswith(_BOM):
            raw = raw[len(_BOM):]
        elif (wide := wide_encoding(raw)) is not None:
            raise JsonReadError(f"file is {wide} encoded; save it as UTF-8")
        scan_limits(raw)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            raise JsonReadError(f"file is not valid UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start} "
                                f"(line {line}); save it as UTF-8") from None
    else:
        text = raw.removeprefix("\ufeff")
        scan_limits(text.encode("utf-8", "replace"))
    if not text.strip():
        raise JsonReadError("file is empty; expected a JSON array of cases or an object with 'cases'")
    return loads_strict(text)


def loads_strict(text: str) -> Any:
    """``json.loads`` that keeps what plain ``json`` hides: objects remember their duplicate keys
    (:class:`JsonObject`, reported by :func:`json_problems`), non-finite numbers become :class:`NonFinite`;
    :class:`JsonReadError` in words for bad syntax, too deep a nesting, a number of more than 4300 digits."""
    try:
        return json.loads(text, object_pairs_hook=object_hook, parse_float=parse_float, parse_constant=NonFinite)
    except json.JSONDecodeError as exc:
        raise JsonReadError(f"invalid JSON at line {exc.lineno}, column {exc.colno}: {_json_message(exc)}") from None
    except RecursionError:
        raise JsonReadError("JSON is nested too deeply") from None
    except ValueError as exc:  # an integer with more than 4300 digits (Python's int-from-string limit)
        if "digits" in str(exc):
            raise JsonReadError("invalid JSON: a number has more than 4300 digits") from None
        raise JsonReadError(f"invalid JSON: {exc}") from None


def _json_message(exc: json.JSONDecodeError) -> str:
    """The decoder's message, completed where Python's ends mid-sentence ("Invalid control character at")."""
    if exc.msg.startswith("Invalid control character"):
        char = exc.doc[exc.pos] if exc.pos < len(exc.doc) else "?"
        return (f"a raw control character U+{ord(char):04X} inside a string; write it escaped "
                f"(\\u{ord(char):04x}) or remove it")
    return exc.msg


def _unstorable(text: str) -> str | None:
    """Why PostgreSQL (and UTF-8) cannot hold ``text``: a NUL or a lone surrogate; ``None`` if it can."""
    if "\x00" in text:
        return "contains a NUL character (\\u0000), which PostgreSQL cannot store"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains an unpaired UTF-16 surrogate (invalid Unicode)"
    return None


def _escaped(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")[:60]


def json_problems(value: Any, path: str, limit: int = 10, *, text: bool = False) -> list[tuple[str, str]]:
    """``(path, message)`` for what would not survive a round trip through strict JSON and PostgreSQL inside
    ``value`` (non-finite numbers, duplicate object keys, NUL and lone surrogates), at most ``limit``; paths
    like ``metadata.a[2].b``. NUL and lone surrogates only with ``text``.
    Iterative, so any depth the reader accepted is walked."""
    out: list[tuple[str, str]] = []
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack and len(out) < limit:
        where, item = stack.pop()
        if isinstance(item, NonFinite):
            out.append((where, f"non-finite number {item.text} is not JSON"))
        elif text and isinstance(item, str) and (problem := _unstorable(item)):
            out.append((where, problem))
        elif isinstance(item, dict):
            out += [(f"{where}.{key}", "appears more than once in this object")
                    for key in getattr(item, "duplicate_keys", ())]
            out += [(f"{where}.{_escaped(key)}", f"the key {problem}") for key in item
                    if text and (problem := _unstorable(key))]
            stack += [(f"{where}.{key}", v) for key, v in reversed(list(item.items()))]
        elif isinstance(item, list):
            stack += [(f"{where}[{i}]", v) for i, v in reversed(list(enumerate(item)))]
    return out[:limit]
