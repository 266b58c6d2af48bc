"""Reading a folder of .md/.txt/.html/.jsonl documents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rag_pipeline.knowledge_base.sources import SourceDocument, SourceError, html_to_text, read_folder

HTML = """<!doctype html>
<html><head><title>SSO setup</title>
<style>body { color: red; } .secret-style { display: none }</style>
<script>var trackingSecret = "do-not-index";</script></head>
<body>
  <h1>Single   sign-on</h1>
  <p>Connect your <b>identity provider</b> &amp; test   the login.</p>
  <script type="text/javascript">console.log("hidden script text")</script>
  <ul><li>Okta</li><li>Azure AD</li></ul>
  <div>单点登录配置步骤</div>
</body></html>
"""


def write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding=encoding)
    return path


def test_reads_md_txt_html_jsonl(tmp_path: Path) -> None:
    write(tmp_path / "b-notes.txt", "Plain text notes.\n第二行。\n")
    write(tmp_path / "a-guide.md", "# Guide\n\nRead me first.\n")
    write(tmp_path / "sub" / "sso.html", HTML)
    lines = [
        {"id": "q1", "title": "Refunds", "text": "Refunds take 5 days."},
        {"_id": 7, "text": "退款需要五个工作日。"},
    ]
    write(tmp_path / "faq.jsonl", "\n".join(json.dumps(o, ensure_ascii=False) for o in lines) + "\n\n")
    write(tmp_path / "image.png", "not a document")
    write(tmp_path / "readme.pdf", "not supported either")

    docs = read_folder(tmp_path)
    by_name = {d.original_name: d for d in docs}
    assert [d.original_name for d in docs] == [
        "a-guide.md", "b-notes.txt", "faq.jsonl#q1", "faq.jsonl#7", "sub/sso.html"
    ]
    assert by_name["a-guide.md"] == SourceDocument("a-guide.md", None, "# Guide\n\nRead me first.\n")
    assert by_name["b-notes.txt"].text == "Plain text notes.\n第二行。\n"
    # jsonl: one document per line named file.jsonl#id, title prepended to the text
    assert by_name["faq.jsonl#q1"].title == "Refunds"
    assert by_name["faq.jsonl#q1"].text == "Refunds\n\nRefunds take 5 days."
    assert by_name["faq.jsonl#7"].title is None
    assert by_name["faq.jsonl#7"].text == "退款需要五个工作日。"

    html = by_name["sub/sso.html"]
    assert html.title == "SSO setup"
    assert html.text == (
        "Single sign-on\n\nConnect your identity provider & test the login.\n\nOkta\n\nAzure AD\n\n单点登录配置步骤"
    )
    for hidden in ("do-not-index", "hidden script text", "color: red", "secret-style", "SSO setup"):
        assert hidden not in html.text


def test_html_to_text_without_title() -> None:
    title, text = html_to_text("<p>One</p><p>Two<br>Three</p>")
    assert title is None
    assert text == "One\n\nTwo\n\nThree"


def test_utf8_bom_is_dropped(tmp_path: Path) -> None:
    write(tmp_path / "bom.md", "Hello", encoding="utf-8-sig")
    [doc] = read_folder(tmp_path)
    assert doc.text == "Hello"


@pytest.mark.parametrize("name", ["legacy.txt", "legacy.md", "legacy.html", "legacy.jsonl"])
def test_non_utf8_file_is_a_source_error_naming_the_file(tmp_path: Path, name: str) -> None:
    write(tmp_path / "fine.md", "ok")
    content = '{"id": "1", "text": "差旅报销"}' if name.endswith(".jsonl") else "差旅报销政策"
    (tmp_path / name).write_bytes(content.encode("gb18030"))
    with pytest.raises(SourceError, match=r"legacy\.[a-z]+.*not UTF-8"):
        read_folder(tmp_path)


def test_empty_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no .* documents found"):
        read_folder(tmp_path)
    write(tmp_path / "photo.jpg", "x")
    with pytest.raises(SourceError, match="no .* documents found"):
        read_folder(tmp_path)


def test_missing_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="not a folder"):
        read_folder(tmp_path / "nope")
    f = write(tmp_path / "file.md", "x")
    with pytest.raises(SourceError, match="not a folder"):
        read_folder(f)


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ('{"id": "1", "text": "ok"', r"bad\.jsonl:2: invalid JSON"),
        ('{"text": "no id"}', r"bad\.jsonl:2: each line needs an 'id'"),
        ('{"id": "2", "text": 5}', r"bad\.jsonl:2: 'text' must be a string, not a number"),
        ('["not", "an", "object"]', r"bad\.jsonl:2: each line must be a JSON object, not a list"),
    ],
)
def test_bad_jsonl_lines(tmp_path: Path, line: str, match: str) -> None:
    write(tmp_path / "bad.jsonl", '{"id": "1", "text": "fine"}\n' + line + "\n")
    with pytest.raises(SourceError, match=match):
        read_folder(tmp_path)


def test_control_characters_are_removed_and_empty_documents_skipped(tmp_path: Path) -> None:
    write(tmp_path / "ctrl.md", "a\x00b\x01c\x1b[0m\x7fd\te\r\nf\x0cg")
    (tmp_path / "nul.md").write_bytes(b"\x00" * 100)
    write(tmp_path / "empty.txt", "")
    write(tmp_path / "blank.html", "<html><head><title>Only a title</title></head><body> </body></html>")
    write(tmp_path / "docs.jsonl", json.dumps({"id": "x", "text": "\x00\x02"}) + "\n"
          + json.dumps({"id": "t", "title": "Ti\x00tle", "text": ""}) + "\n")
    docs = read_folder(tmp_path)
    assert isinstance(docs, list), "still a list of SourceDocument for every caller"
    assert [(d.original_name, d.title, d.text) for d in docs] == [
        ("ctrl.md", None, "abc[0md\te\r\nfg"), ("docs.jsonl#t", "Title", "Title\n\n")]
    assert [(s.name, s.reason.split(" (")[0]) for s in docs.skipped] == [
        ("blank.html", "no text"), ("docs.jsonl#x", "no text"), ("empty.txt", "no text"), ("nul.md", "no text")]
    assert docs.warnings()[0] == "skipped blank.html: no text (empty, whitespace or control characters only)"


def test_only_skipped_files_is_an_error_listing_them(tmp_path: Path) -> None:
    (tmp_path / "nul.md").write_bytes(b"\x00")
    (tmp_path / "loop.md").symlink_to(tmp_path / "loop.md")
    with pytest.raises(SourceError, match=r"no .* documents found with text \(skipped loop\.md: .*symlink loop"):
        read_folder(tmp_path)


def test_html_text_after_an_unclosed_tag_is_kept() -> None:
    assert html_to_text("<p>Start <b unclosed and the rest") == (None, "Start <b unclosed and the rest")
    assert html_to_text("<p>a < b and c</p>")[1] == "a < b and c"


def test_jsonl_lines_are_split_on_newlines_only_and_keep_a_bom(tmp_path: Path) -> None:
    text = "one\u2028two\x85three"
    (tmp_path / "c.jsonl").write_bytes(b"\xef\xbb\xbf" + json.dumps({"id": 1, "text": text}, ensure_ascii=False)
                                       .encode("utf-8") + b"\r\n")
    [doc] = read_folder(tmp_path)
    assert (doc.original_name, doc.text) == ("c.jsonl#1", text)
