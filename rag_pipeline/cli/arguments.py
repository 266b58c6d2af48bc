"""Bounded argparse types for the numeric flags: a value out of range is a usage error (exit 2, one line naming
the flag and the range), never a database error (``bigint out of range``) or a Python one
(``Exceeds the limit ... for integer string conversion``) later."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

_MAX_DIGITS = 30  # longer than any bound below; a 5,001-digit number is refused before int() sees it


def int_between(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer in ``[low, high]``."""

    def parse(text: str) -> int:
        stripped = text.strip()
        try:
            if len(stripped) > _MAX_DIGITS:
                raise ValueError
            value = int(stripped)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer between {low} and {high}, got {_shown(text)}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected an integer between {low} and {high}, got {value}")
        return value

    parse.__name__ = "integer"  # argparse names the type in its own messages
    return parse


def finite_float(low: float | None = None, high: float | None = None, *, exclusive: bool = False
                 ) -> Callable[[str], float]:
    """An argparse ``type``: a finite number, within ``[low, high]`` (``(low, high)`` if ``exclusive``)."""
    if low is None and high is None:
        expected = "a finite number"
    elif exclusive:
        expected = f"a number strictly between {low:g} and {high:g}"
    else:
        expected = f"a number between {low:g} and {high:g}"

    def parse(text: str) -> float:
        try:
            if len(text.strip()) > 100:
                raise ValueError
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {_shown(text)}") from None
        ok = math.isfinite(value)
        if ok and low is not None:
            ok = value > low if exclusive else value >= low
        if ok and high is not None:
            ok = value < high if exclusive else value <= high
        if not ok:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {_shown(text)}")
        return value

    parse.__name__ = "number"
    return parse


def _shown(text: str) -> str:
    """The argument as typed, cut to 40 characters (a 5,001-digit value is not echoed whole)."""
    return repr(text if len(text) <= 40 else text[:37] + "...")


# The bounds of the commands' flags (one place; docs/failure-behaviour.md, "Signals, pipes and flags", lists them).
LIMIT = int_between(1, 100_000)  # runs --limit
BATCH_SIZE = int_between(1, 10_000)  # evaluate --batch-size
READERS = int_between(1, 64)  # evaluate --readers
K = int_between(1, 1000)  # import-beir --k
RESAMPLES = int_between(1, 1_000_000)  # diagnose/tune --resamples
TOP = int_between(1, 1_000_000)  # tune --top
FOLDS = int_between(2, 1_000_000)  # tune --folds (also at most the number of cases, checked by tune)
SEED = int_between(0, 2**32 - 1)  # tune --seed
CHUNK_CHARS = int_between(0, 10_000_000)  # ingest --chunk-size / --chunk-overlap (chunking checks the rest)
MARGIN = finite_float()  # compare --margin
ALPHA = finite_float(0.0, 1.0, exclusive=True)  # compare --alpha
