"""The answers file the collector writes: one whole ``O_APPEND`` + ``fsync`` line per finished case, resumable
(:func:`open_for_resume`), one collector per file (:func:`output_lock`); docs/answers-collection.md."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import threading
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from rag_pipeline.answers.answers_file import line_problems
from rag_pipeline.answers.collection.reply_mapping import error_record
from rag_pipeline.contracts.answers import AnswerRecord
from rag_pipeline.contracts.errors import BadInputError, ConflictError
from rag_pipeline.storage.files import FileReadError, format_size, open_regular, read_lines_bounded, write_atomic
from rag_pipeline.storage.names import printable

MAX_LINE_BYTES = 1024 * 1024


class AnswersFileError(BadInputError, ValueError):
    """An existing ``--output`` the collector cannot resume (message: file, line, field)."""


class OutputBusyError(ConflictError, ValueError):
    """Another collector is writing the same ``--output`` (CLI exit 2, HTTP 409)."""


def lock_path(path: Path) -> Path:
    """The lock file of the answers file ``path``: ``.<name>.lock`` in its folder."""
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def output_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` for the block, else :class:`OutputBusyError` at once."""
    lock = lock_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            raise AnswersFileError(f"--output {printable(path)}: cannot create its lock file {printable(lock)}: "
                                   f"{exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise OutputBusyError(f"--output {printable(path)}: another collector is writing this file (it "
                                      f"holds {printable(lock)}); wait for it to end or choose another "
                                      "--output") from None
            raise AnswersFileError(f"--output {printable(path)}: cannot lock {printable(lock)}: "
                                   f"{exc.strerror or exc}") from None
        try:  # the holder before us may have removed the file we opened: lock the one at the path
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)  # while still locked: whoever opened it before finds it gone and opens a new one
        os.close(fd)


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


def _refused(record: AnswerRecord) -> tuple[str | None, bytes]:
    """``(why the readers would refuse the record's line, or None; the line)``."""
    text = json.dumps(record.model_dump(exclude_none=True), ensure_ascii=False, separators=(",", ":")) + "\n"
    problems = line_problems(text)
    if problems:
        first = problems[0]
        return (f"field {first.field!r}: " if first.field else "") + first.message, b""
    try:
        line = text.encode("utf-8")
    except UnicodeEncodeError:  # only raw_response is left unchecked by the reader
        return "field 'raw_response': contains an unpaired UTF-16 surrogate (invalid Unicode)", b""
    if len(line) > MAX_LINE_BYTES:
        return (f"the answer line would be {len(line) / 2**20:.1f} MB; an answers line is at most "
                f"{format_size(MAX_LINE_BYTES)}"), b""
    return None, line


def storable(record: AnswerRecord) -> tuple[AnswerRecord, bytes]:
    """``(record, line)`` as written: the record if its line is accepted, else its case's error line."""
    problem, line = _refused(record)
    if problem is None:
        return record, line
    error = f"the answer line cannot be stored: {problem}"
    if record.status == "error" and record.error:
        error = f"{record.error} (and {error})"
    raw = record.raw_response
    for candidate in (raw, raw[:len(raw) // 4] if raw else None, None):
        fallback = error_record(record.case_id, error, raw=candidate, latency_ms=record.latency_ms,
                                attempts=record.attempts, answerer=record.answerer)
        problem, line = _refused(fallback)
        if problem is None:
            return fallback, line
    fallback = AnswerRecord(case_id=record.case_id, status="error", error="the answer line cannot be stored")
    return fallback, record_line(fallback)


class AnswersWriter:
    """Appends lines to an answers file, one atomic write + fsync each (thread-safe)."""

    def __init__(self, path: Path, state: ResumeState):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() or state.kept:  # drop the torn line and the error lines before appending
            mode = stat.S_IMODE(os.stat(path).st_mode) if path.exists() else None
            write_atomic(path, "".join(record_line(r).decode("utf-8") for r in state.kept.values()))
            if mode is not None:  # write_atomic's temporary file is created 0600
                os.chmod(path, mode)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        self._lock = threading.Lock()

    def append(self, record: AnswerRecord) -> AnswerRecord:
        """Append the record's line (its :func:`storable` error line if refused); the record written."""
        record, line = storable(record)
        with self._lock:
            written = os.write(self._fd, line)
            if written != len(line):  # a regular file takes a whole write unless the disk is full
                raise OSError(f"{printable(self.path)}: short write ({written} of {len(line)} bytes): disk full?")
            os.fsync(self._fd)
        return record

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> AnswersWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
