"""The README and the docs/ pages hold together: every relative link and ``#anchor`` resolves, every page is
linked from the README, and the README stays short enough to read in five minutes.

Markdown is parsed by markdown-it-py (CommonMark + tables), so links inside code are not links; anchors follow
GitHub's rule for headings: the heading's text lower-cased, punctuation dropped, spaces as hyphens, and a
repeated heading suffixed ``-1``, ``-2``, …
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
README_MAX_LINES = 250
_PARSER = MarkdownIt("commonmark").enable("table")


def _tokens(text: str):
    """Every token of ``text``, inline children included, in document order."""
    for token in _PARSER.parse(text):
        yield token
        yield from token.children or ()


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading's text (before de-duplication)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@functools.cache  # each link to a page asks for its anchors: the page is parsed once
def anchors(text: str) -> frozenset[str]:
    """The anchors of every heading of a Markdown text, repeated headings numbered as GitHub numbers them."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    tokens = _PARSER.parse(text)
    for opening, inline in zip(tokens, tokens[1:], strict=False):
        if opening.type != "heading_open":
            continue
        words = "".join(child.content for child in inline.children or () if child.type in ("text", "code_inline"))
        slug = github_slug(words)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(found)


def links(text: str) -> list[str]:
    """Every link and image target of a Markdown text."""
    found = []
    for token in _tokens(text):
        if token.type == "link_open":
            found.append(str(token.attrs["href"]))
        elif token.type == "image":
            found.append(str(token.attrs["src"]))
    return found


def broken_links(path: Path, root: Path) -> list[str]:
    """The relative links of the Markdown file ``path`` whose file, or whose ``#anchor``, does not exist."""
    text = path.read_text(encoding="utf-8")
    wrong = []
    for target in links(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: — not ours to check
            continue
        where, _, anchor = unquote(target).partition("#")
        resolved = (path.parent / where).resolve() if where else path
        if not resolved.is_relative_to(root) or not resolved.exists():
            wrong.append(f"{path.relative_to(root)}: {target}: no such file")
        elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved.read_text(encoding="utf-8"))):
            wrong.append(f"{path.relative_to(root)}: {target}: no heading with that anchor")
    return wrong


def test_the_slug_rule_is_githubs():
    assert github_slug("Strategies (`rag_pipeline/retrieval/strategies.yaml`)") == \
        "strategies-rag_pipelineretrievalstrategiesyaml"
    assert github_slug("Lineage: which knowledge-base version a run measured") == \
        "lineage-which-knowledge-base-version-a-run-measured"
    assert github_slug("6.2 Endpoints") == "62-endpoints"
    assert anchors("# Notes\n\n## Notes\n\n```\n# not a heading\n```\n") == {"notes", "notes-1"}


def test_a_broken_link_or_anchor_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## Exit codes\n", encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Title\n\n[ok](docs/page.md#exit-codes) [self](#title) [web](https://example.org/x)\n"
        "[gone](docs/missing.md) [bad anchor](docs/page.md#exit-code) ![pic](docs/pic.png)\n"
        "`[in code](docs/nowhere.md)`\n\n```\n[fenced](docs/nowhere.md)\n```\n"
        "| a | b |\n|---|---|\n| [cell](#no-such-heading) | x |\n",
        encoding="utf-8")
    assert broken_links(readme, tmp_path) == [
        "README.md: docs/missing.md: no such file",
        "README.md: docs/page.md#exit-code: no heading with that anchor",
        "README.md: docs/pic.png: no such file",
        "README.md: #no-such-heading: no heading with that anchor",
    ]


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path):
    wrong = broken_links(path, ROOT)
    assert not wrong, "\n".join(wrong)


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(README.parent / unquote(t).partition("#")[0]).resolve() for t in links(README.read_text("utf-8"))}
    unlinked = [str(page.relative_to(ROOT)) for page in PAGES if page.resolve() not in linked]
    assert not unlinked, f"add these to the README's map of the docs: {unlinked}"


def test_the_readme_is_read_in_five_minutes():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move reference text to a docs/ page"
