"""The one plain-text table renderer of the terminal output (``compare``, ``runs``, ``tune``, the demo summary).
It sits below the front ends because both render through it: the CLI, and the Dagster demo summary by way of
:mod:`rag_pipeline.analysis.comparison_report`."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence


def cell_width(text: str) -> int:
    """Terminal columns of ``text`` (wide CJK characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def text_table(headers: Sequence[str] | None, rows: Sequence[Sequence[str]], *, indent: str = "",
               rule: bool = True) -> str:
    """``headers`` (none: a table of rows only), with ``rule`` a line of dashes under them, and ``rows``: every
    column left-aligned to its widest cell, two spaces apart, trailing spaces stripped. Cells are printed as
    given: the caller escapes user text and pads a cell it wants right-aligned or wider."""
    table = ([list(headers)] if headers is not None else []) + [list(r) for r in rows]
    widths = [max(cell_width(r[i]) for r in table) for i in range(len(table[0]))] if table else []

    def line(cells: list[str]) -> str:
        return (indent + "  ".join(c + " " * (w - cell_width(c)) for c, w in zip(cells, widths, strict=True))).rstrip()

    lines = [line(r) for r in table]
    if headers is not None and rule:
        lines.insert(1, indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)
