"""What the commands print: JSON documents and progress bars on stderr."""

from __future__ import annotations

import json
import sys


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


def print_warnings(warnings: list[str]) -> None:
    """Warnings go to stderr, one line each: ``rag-pipeline: warning: ...``."""
    for warning in warnings:
        print(f"rag-pipeline: warning: {warning}", file=sys.stderr)


BAR_STYLE = {"unit_scale": True, "bar_format": "{l_bar}{bar}| {n:,}/{total:,} [{elapsed}<{remaining}, {rate_fmt}]"}
"""Counts and rates read by people: ``1,369,568/2,000,000 [..., 685k chunks/s]``, not ``684784.33chunk/s``."""


def stage_progress():
    """A ``progress(stage, done, total)`` callback drawing one bar per stage (ingestion: chunks)."""
    from tqdm import tqdm  # noqa: PLC0415

    bars: dict[str, tqdm] = {}

    def progress(stage: str, done: int, total: int) -> None:
        bar = bars.get(stage) or bars.setdefault(stage, tqdm(total=total, desc=stage, unit=" chunks",
                                                                        file=sys.stderr, **BAR_STYLE))
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return progress


def case_progress(quiet: bool = False):
    """A ``progress(version, cases)`` factory for evaluations: one bar per strategy run (cases)."""
    from tqdm import tqdm  # noqa: PLC0415

    def for_run(version: str, total: int):
        bar = tqdm(total=total, desc=version, unit=" cases", file=sys.stderr, disable=quiet, **BAR_STYLE)

        def progress(done: int, _total: int) -> None:
            bar.update(done - bar.n)
            if done >= total:
                bar.close()

        return progress

    return for_run
