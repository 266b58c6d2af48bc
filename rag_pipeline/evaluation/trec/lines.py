"""Reading TREC files line by line (run: ``qid Q0 docno rank score tag``; qrels: ``qid iter docno grade``) and the
one mapping of an external document id to a chunk UUID. A bad line is a :class:`TrecFileError` naming the file, the
line and the field."""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.storage.files import open_regular, read_lines_bounded
from rag_pipeline.storage.ids import EXTERNAL_ID_NAMESPACE, chunk_key, key_prefix  # noqa: F401 - the one mapping
from rag_pipeline.storage.names import printable

MAX_LINE = 64 * 1024
RUN_FIELDS = ("qid", "Q0", "docno", "rank", "score", "tag")
QRELS_FIELDS = ("qid", "iteration", "docno", "grade")


class TrecFileError(BadInputError, ValueError):
    """A run, qrels or topics file that cannot be used: ``path:line: field <name>: reason``."""

    def __init__(self, path: str | os.PathLike, line: int | None, field: str | None, reason: str):
        self.path, self.line, self.field, self.reason = str(path), line, field, reason
        where = printable(self.path) + (f":{line}" if line is not None else "")
        super().__init__(f"{where}: " + (f"field {field}: " if field else "") + reason
                         + "; nothing was stored")


def chunk_uuid(knowledge_base: str, docno: str) -> tuple[uuid.UUID, bool]:
    """The chunk UUID of ``docno`` in ``knowledge_base`` and whether it is derived: a canonical (lower-case,
    hyphenated) UUID is itself; any other id is ``uuid5(EXTERNAL_ID_NAMESPACE, "<knowledge base>\\x1f<docno>")``."""
    key, derived = chunk_key(key_prefix(knowledge_base), docno)
    return uuid.UUID(key), derived


def _fields(path, lineno: int, raw: bytes, names: tuple[str, ...]) -> list[str] | None:
    """The whitespace-separated fields of a line (None: a blank line), exactly ``len(names)`` of them."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TrecFileError(path, lineno, None, f"not UTF-8 (byte {exc.start + 1} of the line)") from None
    if "\x00" in text:
        raise TrecFileError(path, lineno, None, f"holds a NUL character (byte {raw.index(0) + 1} of the line)")
    parts = text.split()
    if not parts:
        return None
    if len(parts) != len(names):
        missing = names[len(parts)] if len(parts) < len(names) else None
        raise TrecFileError(path, lineno, missing, f"{len(parts)} fields, expected {len(names)} "
                            f"({' '.join(names)})" + ("" if missing else f"; extra: {printable(parts[len(names)])}"))
    return parts


def _number(path, lineno: int, field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TrecFileError(path, lineno, field, f"'{printable(text)}' is not a number") from None
    if not math.isfinite(value):
        raise TrecFileError(path, lineno, field, f"'{printable(text)}' is not a finite number")
    return value


def read_run(path: str | os.PathLike) -> Iterator[tuple[int, str, str, float]]:
    """``(line number, qid, docno, score)`` of each line of a run file, streamed (blank lines skipped). The rank
    and the tag are read and ignored, as trec_eval does; the score must be a finite number."""
    with open_regular(path) as handle:
        for lineno, _, raw in read_lines_bounded(handle, path, MAX_LINE):
            parts = _fields(path, lineno, raw, RUN_FIELDS)
            if parts is not None:
                yield lineno, parts[0], parts[2], _number(path, lineno, "score", parts[4])


@dataclass(frozen=True, slots=True)
class QrelsLine:
    line: int
    qid: str
    docno: str
    grade: int


def read_qrels(path: str | os.PathLike, max_grade: int) -> Iterator[QrelsLine]:
    """The lines of a qrels file (``qid iteration docno grade``; the iteration ignored), grades 0..``max_grade``
    (a negative grade, trec_eval's "not judged", is refused: leave the line out)."""
    with open_regular(path) as handle:
        for lineno, _, raw in read_lines_bounded(handle, path, MAX_LINE):
            parts = _fields(path, lineno, raw, QRELS_FIELDS)
            if parts is None:
                continue
            text = parts[3]
            if not text.isascii() or not text.isdigit() or int(text) > max_grade:
                raise TrecFileError(path, lineno, "grade",
                                    f"'{printable(text)}' is not an integer grade 0..{max_grade}")
            yield QrelsLine(lineno, parts[0], parts[2], int(text))


def run_line(qid: str, docno: str, rank: int, score: float, tag: str) -> str:
    """One run file line; the score in its shortest form that reads back as the same number."""
    return f"{qid} Q0 {docno} {rank} {score!r} {tag}\n"
