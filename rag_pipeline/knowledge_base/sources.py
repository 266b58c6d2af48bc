"""Reading source documents from a folder: ``.md``, ``.txt``, ``.html`` and ``.jsonl`` (one document a line)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

SUPPORTED_SUFFIXES = (".md", ".txt", ".html", ".htm", ".jsonl")


class SourceError(ValueError):
    pass


@dataclass(frozen=True)
class SourceDocument:
    original_name: str  # path relative to the folder; ``file.jsonl#<id>`` for a jsonl line
    title: str | None
    text: str


class _TextExtractor(HTMLParser):
    _BLOCK = {"p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "section", "article", "pre"}
    _SKIP = {"script", "style", "head"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: str | None = None
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag, attrs):  # noqa: ANN001, ARG002
        if tag in self._SKIP:
            self._skip += 1
        if tag == "title":
            self._in_title = True
        if tag in self._BLOCK:
            self.parts.append("\f")

    def handle_endtag(self, tag):  # noqa: ANN001
        if tag in self._SKIP and self._skip:
            self._skip -= 1
        if tag == "title":
            self._in_title = False
        if tag in self._BLOCK:
            self.parts.append("\f")

    def handle_data(self, data):  # noqa: ANN001
        if self._in_title:
            self.title = (self.title or "") + data.strip()
        elif not self._skip:
            self.parts.append(data)


def html_to_text(html: str) -> tuple[str | None, str]:
    """Visible text of an HTML page (whitespace folded, one paragraph per block element) and its <title>."""
    parser = _TextExtractor()
    parser.feed(html)
    blocks = (" ".join(block.split()) for block in "".join(parser.parts).split("\f"))
    text = "\n\n".join(block for block in blocks if block)
    return parser.title, text


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _jsonl_documents(path: Path, rel: str) -> list[SourceDocument]:
    docs = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SourceError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
        doc_id = obj.get("id", obj.get("_id")) if isinstance(obj, dict) else None
        text = obj.get("text") if isinstance(obj, dict) else None
        if doc_id is None or not isinstance(text, str):
            raise SourceError(f"{path}:{lineno}: each line needs an 'id' (or '_id') and a string 'text'")
        if str(doc_id) in seen:
            raise SourceError(f"{path}:{lineno}: duplicate id {doc_id!r} (first on line {seen[str(doc_id)]})")
        seen[str(doc_id)] = lineno
        title = obj.get("title") or None
        body = f"{title}\n\n{text}" if title else text
        docs.append(SourceDocument(f"{rel}#{doc_id}", title, body))
    return docs


def read_folder(folder: str | Path) -> list[SourceDocument]:
    """Every supported document below ``folder``, sorted by name (deterministic)."""
    root = Path(folder)
    if not root.is_dir():
        raise SourceError(f"{root}: not a folder")
    docs: list[SourceDocument] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        suffix = path.suffix.lower()
        if suffix not in SUPPORTED_SUFFIXES:
            continue
        if suffix == ".jsonl":
            docs.extend(_jsonl_documents(path, rel))
        elif suffix in (".html", ".htm"):
            title, text = html_to_text(_read_text(path))
            docs.append(SourceDocument(rel, title, text))
        else:
            docs.append(SourceDocument(rel, None, _read_text(path)))
    if not docs:
        raise SourceError(f"{root}: no {', '.join(SUPPORTED_SUFFIXES)} documents found")
    return docs
