"""The limit-first pass over dataset bytes: the case limit and a memory budget, checked before anything is built.

``json.loads`` of a 50 MB file of ``[0,0,…]`` or ``{},{},…`` builds tens of millions of Python objects (gigabytes)
before any rule can look at them. :func:`scan_limits` streams the bytes once through ijson's C parser, building
nothing: it counts the items of the cases array (the bare array, or the top-level ``cases``) and estimates what
the decoded document would take in memory, and raises :class:`ScanLimitError` at the first item past
:data:`~rag_pipeline.contracts.dataset.MAX_CASES` or past :data:`MAX_DECODED_BYTES` (docs/design.md §2.2).
Anything the fast parser cannot read (a syntax error, an integer beyond 64 bits) ends the pass: the strict decoder
then words the error, unless the file is larger than :data:`MAX_UNSCANNED_BYTES`, which is refused here.
"""

from __future__ import annotations

import io
import re

import ijson

from rag_pipeline.contracts.dataset import MAX_CASES

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
