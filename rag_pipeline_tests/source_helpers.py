"""Parsing the project's own source in tests (layout, hygiene and SQL-splice checks).

:func:`parse_source` is :func:`ast.parse` with one retry on CPython 3.11's spurious ``SystemError: AST constructor
recursion depth mismatch`` (python/cpython#106905: the AST constructor's recursion counter is interpreter-wide and
can be left off by another thread's parse, e.g. a library parsing source in a background thread of an earlier
test). The error says nothing about the file; a second parse of the same text succeeds. Any other error — a
``SyntaxError`` above all — is raised at once.
"""

from __future__ import annotations

import ast
import functools


@functools.cache  # the layout, SQL and hygiene checks parse the same files: once per session (trees are not changed)
def parse_source(text: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(text, filename)``, retried up to twice on the CPython 3.11 recursion-depth ``SystemError``."""
    for attempt in range(3):
        try:
            return ast.parse(text, filename=filename)
        except SystemError as exc:
            if "recursion depth mismatch" not in str(exc) or attempt == 2:
                raise
    raise AssertionError("unreachable")
