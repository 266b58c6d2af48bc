"""Reading source documents from a folder: ``.md``, ``.txt``, ``.html`` and ``.jsonl`` (one document a line).

Files go through the bounded reader (:mod:`rag_pipeline.storage.files`); a document over
``RAG_MAX_DOCUMENT_BYTES`` fails the whole read. Control characters are removed from every text. Empty documents,
broken or looping symlinks and unreadable files are skipped and listed in ``.skipped``; a link out of the folder
is refused (:func:`read_folder`, docs/cli.md)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.knowledge_base import jsonl_lines
from rag_pipeline.settings import get_settings
from rag_pipeline.storage.files import (
    FileReadError,
    check_regular,
    format_size,
    open_regular,
    read_bounded,
    read_lines_bounded,
)
from rag_pipeline.storage.names import printable

SUPPORTED_SUFFIXES = (".md", ".txt", ".html", ".htm", ".jsonl")
# C0 controls except \t \n \r, and DEL: removed from every document text before chunking.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# A JSON string escapes a character in at most 6 bytes (\uXXXX): the longest line a document within the
# limit can take, plus room for its id and title.
_JSON_ESCAPE_FACTOR = 6
_JSONL_LINE_SLACK = 1024 * 1024
_SKIPPED_CODES = ("loop", "missing", "unreadable")
_NO_TEXT = "no text (empty, whitespace or control characters only)"


class SourceError(BadInputError, ValueError):
    pass


@dataclass(frozen=True)
class SourceDocument:
    original_name: str  # path relative to the folder; ``file.jsonl#<id>`` for a jsonl line
    title: str | None
    text: str


@dataclass(frozen=True)
class SkippedSource:
    """A file (or ``file.jsonl#id``) :func:`read_folder` did not turn into a document, and why."""

    name: str
    reason: str

    def __str__(self) -> str:
        return f"skipped {printable(self.name)}: {self.reason}"


class FolderDocuments(list):
    """The documents of a folder (a plain list of :class:`SourceDocument`) plus ``skipped``: the
    :class:`SkippedSource` entries, for the ingestion's warnings."""

    def __init__(self, docs: Iterable[SourceDocument] = (), skipped: Iterable[SkippedSource] = ()) -> None:
        super().__init__(docs)
        self.skipped: list[SkippedSource] = list(skipped)

    def warnings(self, limit: int = 20) -> list[str]:
        """One line per skipped file (at most ``limit``, then a count)."""
        lines = [str(s) for s in self.skipped[:limit]]
        if len(self.skipped) > limit:
            lines.append(f"... and {len(self.skipped) - limit} more skipped file(s)")
        return lines


def clean_text(text: str) -> str:
    """``text`` without control characters (NUL and other C0 except tab, newline, CR; DEL)."""
    return _CONTROL.sub("", text)


def max_document_bytes() -> int:
    return get_settings().max_document_bytes


class _TextExtractor(HTMLParser):
    _BLOCK = {"p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "section", "article", "pre"}
    _SKIP = {"script", "style", "head"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: str | None = None
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag, _attrs):
        self._tag(tag, 1)

    def handle_endtag(self, tag):
        self._tag(tag, -1)

    def _tag(self, tag: str, step: int) -> None:
        """An opening (``step`` 1) or closing (-1) tag: skipped sections, the title, block boundaries."""
        if tag in self._SKIP:
            self._skip = max(0, self._skip + step)
        if tag == "title":
            self._in_title = step > 0
        if tag in self._BLOCK:
            self.parts.append("\f")

    def handle_data(self, data):
        if self._in_title:
            self.title = (self.title or "") + data.strip()
        elif not self._skip:
            self.parts.append(data)


def html_to_text(html: str) -> tuple[str | None, str]:
    """Visible text of an HTML page (whitespace folded, one paragraph per block element) and its <title>."""
    parser = _TextExtractor()
    parser.feed(clean_text(html))
    parser.close()  # text after an unclosed tag is kept, not dropped with the incomplete tag
    blocks = (" ".join(block.split()) for block in "".join(parser.parts).split("\f"))
    text = "\n\n".join(block for block in blocks if block)
    return parser.title, text


def _decode(raw: bytes, path: Path, offset: int = 0) -> str:
    try:
        return raw.decode("utf-8-sig" if offset == 0 else "utf-8")
    except UnicodeDecodeError as exc:
        bom = 3 if offset == 0 and raw.startswith(b"\xef\xbb\xbf") else 0
        where = offset + bom + exc.start
        raise SourceError(f"{printable(path)}: not UTF-8 text ({exc.reason} at byte {where})") from None


def _jsonl_documents(path: Path, rel: str, limit: int, skipped: list[SkippedSource]) -> list[SourceDocument]:
    docs = []
    seen: dict[str, int] = {}
    max_line = limit * _JSON_ESCAPE_FACTOR + _JSONL_LINE_SLACK
    with open_regular(path) as handle:
        for lineno, offset, raw in read_lines_bounded(handle, path, max_line, what="the line"):
            line = _decode(raw, path, offset)
            if lineno == 1:
                line = line.removeprefix("\ufeff")
            if not line.strip():
                continue
            doc = _jsonl_document(path, rel, lineno, line, seen, limit)
            if doc.text.strip():
                docs.append(doc)
            else:
                skipped.append(SkippedSource(doc.original_name, _NO_TEXT))
    return docs


def _jsonl_document(path: Path, rel: str, lineno: int, line: str, seen: dict[str, int], limit: int) -> SourceDocument:
    """One line as a document (:mod:`jsonl_lines` checks it); any problem names the file, the line and the field."""
    where = f"{printable(path)}:{lineno}"
    try:
        obj = jsonl_lines.parse_line(line)
        doc_id = jsonl_lines.document_id(obj)
        text = jsonl_lines.string_field(obj, "text")
        title = jsonl_lines.string_field(obj, "title", optional=True)
    except jsonl_lines.LineError as exc:
        raise SourceError(f"{where}: {exc}") from None
    size = len(text.encode("utf-8"))
    if size > limit:
        raise SourceError(f"{where}: the 'text' of document {printable(repr(doc_id))} is {size / 1024 / 1024:.1f} "
                          f"MB; the limit is {format_size(limit)} (RAG_MAX_DOCUMENT_BYTES)")
    if doc_id in seen:
        raise SourceError(f"{where}: duplicate id {printable(repr(doc_id))} (first on line {seen[doc_id]})")
    seen[doc_id] = lineno
    title = clean_text(title) or None if title else None
    text = clean_text(text)
    body = f"{title}\n\n{text}" if title else text
    return SourceDocument(f"{rel}#{doc_id}", title, body)


def read_folder(folder: str | Path) -> FolderDocuments:
    """Every supported document below ``folder``, sorted by name; ``.skipped`` lists the files that gave no
    document with the reason.

    A FIFO/device/socket, a document over ``RAG_MAX_DOCUMENT_BYTES``, non-UTF-8 text, a bad ``.jsonl`` line or a
    link to a file outside ``folder`` is a :class:`SourceError` naming the file. A link inside ``folder`` is read under
    its own name unless its target is read anyway; an undecodable file name keeps its bytes as ``\\xe9``."""
    root = Path(folder)
    if not root.is_dir():
        raise SourceError(f"{printable(root)}: not a folder")
    limit = max_document_bytes()
    docs: list[SourceDocument] = []
    skipped: list[SkippedSource] = []
    paths = [p for p in sorted(root.rglob("*")) if p.suffix.lower() in SUPPORTED_SUFFIXES]
    links = _Links(root, paths)
    names: dict[str, Path] = {}
    for path in paths:
        suffix = path.suffix.lower()
        rel = _safe_name(path.relative_to(root).as_posix())
        if rel in names:
            raise SourceError(f"{printable(path)}: its name, written in UTF-8, is {printable(rel)}, the name of "
                              f"{printable(names[rel])} too; rename one of them")
        names[rel] = path
        try:
            check_regular(path)
            if path.is_symlink() and (why := links.skip_reason(path)):
                skipped.append(SkippedSource(rel, why))
                continue
            if suffix == ".jsonl":
                docs.extend(_jsonl_documents(path, rel, limit, skipped))
                continue
            raw_text = _decode(read_bounded(path, limit, what="the document"), path)
        except FileReadError as exc:
            if exc.code in _SKIPPED_CODES:  # a symlink loop, a broken symlink, no permission: listed, not fatal
                skipped.append(SkippedSource(rel, exc.reason))
                continue
            limit_hint = " (RAG_MAX_DOCUMENT_BYTES)" if exc.code == "too_large" else ""
            raise SourceError(f"{exc}{limit_hint}") from None
        if suffix in (".html", ".htm"):
            title, text = html_to_text(raw_text)
            doc = SourceDocument(rel, (clean_text(title) or None) if title else None, clean_text(text))
        else:
            doc = SourceDocument(rel, None, clean_text(raw_text))
        if doc.text.strip():
            docs.append(doc)
        else:
            skipped.append(SkippedSource(rel, _NO_TEXT))
    if not docs:
        detail = f" with text ({'; '.join(str(s) for s in skipped[:5])})" if skipped else ""
        raise SourceError(f"{printable(root)}: no {', '.join(SUPPORTED_SUFFIXES)} documents found{detail}")
    return FolderDocuments(docs, skipped)


def _safe_name(rel: str) -> str:
    """``rel`` as UTF-8 text: the bytes a non-UTF-8 file name could not decode become ``\\xNN``."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(rel).decode("utf-8", "backslashreplace")
    return rel


class _Links:
    """Where the symbolic links among a folder's documents point: outside the folder is refused."""

    def __init__(self, root: Path, paths: list[Path]):
        self.root, self.real_root = root, root.resolve()
        self.own = {p.relative_to(root) for p in paths if not p.is_symlink()}

    def skip_reason(self, link: Path) -> str | None:
        """Why ``link`` (to a regular file) is skipped, or ``None`` to read it; :class:`SourceError` if it leaves
        the folder."""
        target = Path(os.path.realpath(link))
        if not target.is_relative_to(self.real_root):
            raise SourceError(f"{printable(link)}: a symbolic link to {printable(target)}, outside the folder "
                              f"{printable(self.root)}: refused (copy the file into the folder to ingest it)")
        inside = target.relative_to(self.real_root)
        if inside in self.own:
            return f"a symbolic link to {printable(inside.as_posix())}, which is read under its own name"
        return None
