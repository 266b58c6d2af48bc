"""The answers file the collector writes: one JSON line per finished case, resumable (docs/answers-collection.md).

Appending. Each finished case is one ``write`` of its whole line (``\\n`` included) on a file opened with
``O_APPEND``, then ``flush`` and ``fsync``: after a crash or ``kill -9`` the file holds every line written before,
plus at most one torn last line (a write the kernel did not finish).

Resuming. :func:`open_for_resume` reads the file first. A last line without its ``\\n``, or that is not valid
JSON, is torn: it is dropped (a torn line anywhere else is not ours: an error naming the line). Lines with
``status: "ok"`` are kept and their cases skipped; lines with ``status: "error"`` are dropped so their cases
are asked again. The kept lines are written back with :func:`~rag_pipeline.storage.files.write_atomic` before
anything is appended, so the file always holds at most one line per case (the format: docs/design.md §12.2).
A line for a case the dataset does not have, a duplicate case, or a line of another answerer (an endpoint's
lines name none) → an error naming the file and line, and the file is left as it was.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from rag_pipeline.contracts.answers import AnswerRecord
from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.storage.files import FileReadError, open_regular, read_lines_bounded, write_atomic
from rag_pipeline.storage.names import printable

MAX_LINE_BYTES = 1024 * 1024


class AnswersFileError(BadInputError, ValueError):
    """An existing ``--output`` the collector cannot resume (message: file, line, field)."""


@dataclass
class ResumeState:
    """What an existing answers file already holds."""

    kept: dict[str, AnswerRecord] = field(default_factory=dict)
    dropped_errors: int = 0
    dropped_torn: bool = False


def _line_record(path: Path, lineno: int, line: bytes) -> AnswerRecord:
    try:
        return AnswerRecord.model_validate_json(line)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "the line"
        raise AnswersFileError(f"{printable(path)}:{lineno}: {where}: {first['msg']} (an answers file the "
                               "collector cannot resume; choose another --output)") from None


def read_existing(path: Path, case_ids: Collection[str], answerer: str | None) -> ResumeState:
    """The resume state of ``path`` (missing → empty); see the module docstring for the rules."""
    state = ResumeState()
    if not path.exists():
        return state
    try:
        with open_regular(path) as handle:
            lines = list(read_lines_bounded(handle, path, MAX_LINE_BYTES, what="an answers line"))
    except FileReadError as exc:
        raise AnswersFileError(str(exc)) from None
    seen: set[str] = set()
    for lineno, _offset, line in lines:
        last = lineno == len(lines)
        if not line.strip():
            continue
        if last and not line.endswith(b"\n"):
            state.dropped_torn = True
            continue
        if last:
            try:
                json.loads(line)
            except ValueError:
                state.dropped_torn = True
                continue
        record = _line_record(path, lineno, line)
        where = f"{printable(path)}:{lineno}: case_id {record.case_id!r}"
        if record.case_id not in case_ids:
            raise AnswersFileError(f"{where} is not a case of the dataset (an answers file of another dataset? "
                                   "choose another --output)")
        if record.case_id in seen:
            raise AnswersFileError(f"{where} appears twice")
        if record.answerer != answerer:
            raise AnswersFileError(f"{where}: answered by {_who(record.answerer)}, not {_who(answerer)} (one "
                                   "answerer per file; choose another --output)")
        seen.add(record.case_id)
        if record.status == "ok":
            state.kept[record.case_id] = record
        else:
            state.dropped_errors += 1
    return state


def _who(answerer: str | None) -> str:
    return repr(answerer) if answerer else "an endpoint"


def record_line(record: AnswerRecord) -> bytes:
    """The record as one answers-file line (unset optional fields left out)."""
    data = record.model_dump(exclude_none=True)
    return (json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


class AnswersWriter:
    """Appends lines to an answers file, one atomic write + fsync each (thread-safe)."""

    def __init__(self, path: Path, state: ResumeState):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() or state.kept:  # drop the torn line and the error lines before appending
            write_atomic(path, "".join(record_line(r).decode("utf-8") for r in state.kept.values()))
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        self._lock = threading.Lock()

    def append(self, record: AnswerRecord) -> None:
        line = record_line(record)
        with self._lock:
            written = os.write(self._fd, line)
            if written != len(line):  # a regular file takes a whole write unless the disk is full
                raise OSError(f"{printable(self.path)}: short write ({written} of {len(line)} bytes): disk full?")
            os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> AnswersWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
