"""Every ``docs/design.md §N`` the code, the README and the docs/ pages cite names a section the design document has."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
SOURCES = (".py", ".html", ".js", ".css", ".json", ".yaml", ".yml", ".mako", ".md", ".txt")
# "docs/design.md §6.3", also broken over two lines (with a comment marker); a link from README.md or a docs/ page
REFERENCE = re.compile(r"docs/design\.md\s+(?:#\s*)?§(\d+(?:\.\d+)*)")
LINK = re.compile(r"\]\((?:docs/)?design\.md#([^)\s]*)\)")


def _headings(text: str) -> list[str]:
    """The Markdown headings of ``text`` outside fenced code blocks."""
    headings, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            headings.append(m.group(1).strip())
    return headings


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


HEADINGS = _headings(DESIGN.read_text(encoding="utf-8"))
SECTIONS = {m.group(1) for h in HEADINGS if (m := re.match(r"(\d+(?:\.\d+)*) ", h))}
ANCHORS = {_anchor(h) for h in HEADINGS}


def _citing_files() -> list[Path]:
    package = [p for p in sorted((ROOT / "rag_pipeline").rglob("*")) if p.suffix in SOURCES and p.is_file()]
    pages = [p for p in sorted((ROOT / "docs").glob("*.md")) if p != DESIGN]
    return [*package, ROOT / "README.md", *pages]


def _references() -> list[tuple[str, str]]:
    """(where, section number) of every ``docs/design.md §N`` in the package, the README and the docs/ pages."""
    found = []
    for path in _citing_files():
        text = path.read_text(encoding="utf-8")
        for m in REFERENCE.finditer(text):
            found.append((f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}", m.group(1)))
    return found


def test_the_design_document_keeps_the_section_numbers_it_is_cited_by():
    assert {str(n) for n in range(1, 12)} <= SECTIONS
    for sub in ("2.1", "2.2", "3.1", "3.2", "4.1", "4.2", "5.1", "5.2", "5.3", "5.4", "5.5", "6.1", "6.2", "6.3",
                "7.1", "7.2"):
        assert sub in SECTIONS, f"docs/design.md has no section {sub}"


def test_every_reference_names_a_section():
    wrong = [f"{where}: §{section}" for where, section in _references() if section not in SECTIONS]
    assert not wrong, "docs/design.md has no such section:\n" + "\n".join(wrong)


def test_every_link_into_the_design_document_has_its_anchor():
    for path in _citing_files():
        for anchor in LINK.findall(path.read_text(encoding="utf-8")):
            assert anchor in ANCHORS, f"{path.relative_to(ROOT)}: docs/design.md#{anchor} is no heading of it"


def test_the_design_document_links_only_to_its_own_headings():
    for anchor in re.findall(r"\]\(#([^)\s]+)\)", DESIGN.read_text(encoding="utf-8")):
        assert anchor in ANCHORS, f"docs/design.md links to #{anchor}, which is no heading of it"
