"""Hostile document folders: bad ``.jsonl`` lines (wrong types, lone surrogates, deep nesting, huge numbers, NUL in
an id), a file name that is not UTF-8, symbolic links out of the folder. Each bad line exits 2 naming the file,
the line and the field, with nothing written; the CLI runs in-process against the session's real PostgreSQL.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from rag_pipeline.knowledge_base.beir import read_beir
from rag_pipeline.knowledge_base.sources import SourceError, read_folder
from rag_pipeline_tests.reliability.test_hostile_files import assert_clear_user_error, cli, write_folder
from rag_pipeline_tests.reliability_helpers import kb_counts

TAG = uuid.uuid4().hex[:8]
GOOD_LINE = json.dumps({"id": "fine", "title": "Backups", "text": "Backups are tested every quarter."})

# name: (the second line of corpus.jsonl, the field the message must name, a fragment of the problem)
BAD_LINES = {
    "lone_surrogate_text": ('{"id": "a", "text": "broken \\udfff text"}', "'text'", "lone surrogate"),
    "lone_surrogate_id": ('{"id": "a\\udfff", "text": "x"}', "'id'", "lone surrogate"),
    "lone_surrogate_title": ('{"id": "a", "title": "\\ud800t", "text": "x"}', "'title'", "lone surrogate"),
    "deep_extra_field": ('{"id": "a", "text": "x", "extra": ' + "[" * 100_000 + "]" * 100_000 + "}", "'extra'",
                         "nested too deeply"),
    "id_of_5000_digits": ('{"id": ' + "7" * 5000 + ', "text": "x"}', "'id'", "a number of 5,000 digits"),
    "id_too_long": (json.dumps({"id": "i" * 600, "text": "x"}), "'id'", "the limit is 512"),
    "text_dict": ('{"id": "a", "text": {"nested": 1}}', "'text'", "must be a string, not an object"),
    "text_list": ('{"id": "a", "text": ["x"]}', "'text'", "not a list"),
    "text_number": ('{"id": "a", "text": 5}', "'text'", "not a number (5)"),
    "title_number": ('{"id": "a", "title": 123, "text": "x"}', "'title'", "not a number (123)"),
    "title_dict": ('{"id": "a", "title": {"t": 1}, "text": "x"}', "'title'", "not an object"),
    "title_bool": ('{"id": "a", "title": false, "text": "x"}', "'title'", "not a boolean (false)"),
    "id_nan": ('{"id": NaN, "text": "x"}', "'id'", "not NaN"),
    "id_infinity": ('{"_id": -Infinity, "text": "x"}', "'_id'", "not -Infinity"),
    "id_float": ('{"id": 1.5, "text": "x"}', "'id'", "not a number (1.5)"),
    "id_bool": ('{"id": true, "text": "x"}', "'id'", "not a boolean (true)"),
    "id_empty": ('{"id": "", "text": "x"}', "'id'", "is empty"),
    "id_blank": ('{"id": "  ", "text": "x"}', "'id'", "is empty"),
    "id_dict": ('{"id": {"a": 1}, "text": "x"}', "'id'", "not an object"),
    "id_nul": ('{"id": "a\\u0000b", "text": "x"}', "'id'", "control character \\x00"),
    "id_escape": ('{"id": "a\\u001b[2J", "text": "x"}', "'id'", "control character \\x1b"),
    "not_an_object": ("[1, 2]", "each line", "must be a JSON object, not a list"),
}


@pytest.mark.parametrize("name", BAD_LINES)
def test_a_bad_jsonl_line_exits_2_naming_file_line_and_field(engine, capsys, tmp_path: Path, name: str) -> None:
    line, field, problem = BAD_LINES[name]
    folder = write_folder(tmp_path / "docs", {"good.md": "A good document.", "corpus.jsonl": f"{GOOD_LINE}\n{line}\n"})
    with pytest.raises(SourceError) as raised:
        read_folder(folder)
    assert f"corpus.jsonl:2: {field}" in str(raised.value) and problem in str(raised.value), str(raised.value)
    before = kb_counts(engine)
    rc, out, err = cli(capsys, "ingest", str(folder), "--knowledge-base", f"bad-line-{TAG}")
    assert_clear_user_error(rc, out, err, "corpus.jsonl:2: ", field, problem)
    assert kb_counts(engine) == before


def test_a_huge_number_in_an_ignored_field_is_harmless(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "docs", {"c.jsonl": '{"id": 42, "text": "x", "n": ' + "9" * 5000 + "}\n"})
    assert [(d.original_name, d.title, d.text) for d in read_folder(folder)] == [("c.jsonl#42", None, "x")]


def documents_of(engine: sa.Engine, kb: str) -> list[str]:
    with engine.connect() as conn:
        return sorted(conn.execute(sa.text(
            "SELECT d.original_name FROM documents d JOIN knowledge_bases k ON k.id = d.knowledge_base_id "
            "WHERE k.name = :kb AND NOT d.is_deleted"), {"kb": kb}).scalars())


def test_a_file_name_that_is_not_utf8_is_ingested_under_an_escaped_name(engine, capsys, tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "docs", {"plain.md": "A plain document."})
    with open(os.path.join(os.fsencode(folder), b"caf\xe9.md"), "w", encoding="utf-8") as f:
        f.write("Coffee is served at ten.")
    kb = f"latin1-name-{TAG}"
    rc, out, err = cli(capsys, "ingest", str(folder), "--knowledge-base", kb)
    assert rc == 0, err
    assert documents_of(engine, kb) == ["caf\\xe9.md", "plain.md"]
    rc, out, err = cli(capsys, "ingest", str(folder), "--knowledge-base", kb)  # stable: the same name again
    assert rc == 0 and json.loads(out)["documents_unchanged"] == 2, (out, err)


def test_an_escaped_name_colliding_with_a_real_one_is_refused(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "docs", {"caf\\xe9.md": "one"})
    with open(os.path.join(os.fsencode(folder), b"caf\xe9.md"), "w", encoding="utf-8") as f:
        f.write("two")
    with pytest.raises(SourceError, match="rename one of them"):
        read_folder(folder)


def test_a_symlink_out_of_the_folder_is_refused_naming_the_link(engine, capsys, tmp_path: Path) -> None:
    outside = write_folder(tmp_path / "elsewhere", {"secret.txt": "root:x:0:0:root:/root:/bin/bash"})
    folder = write_folder(tmp_path / "docs", {"good.md": "A good document."})
    (folder / "passwd.txt").symlink_to("/etc/passwd")
    before = kb_counts(engine)
    rc, out, err = cli(capsys, "ingest", str(folder), "--knowledge-base", f"link-out-{TAG}")
    assert_clear_user_error(rc, out, err, f"{folder / 'passwd.txt'}: a symbolic link to /etc/passwd, outside")
    (folder / "passwd.txt").unlink()
    (folder / "sub").mkdir()
    (folder / "sub" / "notes.md").symlink_to(Path("..") / ".." / "elsewhere" / "secret.txt")
    rc, out, err = cli(capsys, "ingest", str(folder), "--knowledge-base", f"link-out-{TAG}")
    assert_clear_user_error(rc, out, err, f"{folder / 'sub' / 'notes.md'}: a symbolic link to "
                                          f"{(outside / 'secret.txt').resolve()}, outside")
    assert kb_counts(engine) == before


def test_a_symlink_inside_the_folder_is_read_once(engine, capsys, tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "docs", {"good.md": "A good document.", "data/raw.txt": "Raw notes."})
    (folder / "alias.md").symlink_to("good.md")  # good.md is read under its own name: the link is skipped
    (folder / "raw.md").symlink_to(Path("data") / "raw.txt")  # raw.txt itself is read too (a supported suffix)
    (folder / "kept.md").symlink_to(Path("data") / "plain.text")
    (folder / "data" / "plain.text").write_text("Only reachable through the link.", encoding="utf-8")
    kb = f"link-in-{TAG}"
    rc, out, err = cli(capsys, "ingest", str(folder), "--knowledge-base", kb)
    assert rc == 0, err
    assert "skipped alias.md: a symbolic link to good.md, which is read under its own name" in err
    assert "skipped raw.md: a symbolic link to data/raw.txt" in err
    assert documents_of(engine, kb) == ["data/raw.txt", "good.md", "kept.md"]


@pytest.mark.parametrize("corpus_line, problem", [
    ('{"_id": "d1", "text": "x", "extra": ' + "{\"a\": " * 50_000 + "1" + "}" * 50_000 + "}",
     "corpus.jsonl:1: 'extra': nested too deeply"),
    ("[1]", "corpus.jsonl:1: each line must be a JSON object"),
])
def test_a_hostile_beir_corpus_line_is_a_clear_error(tmp_path: Path, corpus_line: str, problem: str) -> None:
    folder = write_folder(tmp_path / "beir", {"corpus.jsonl": corpus_line + "\n",
                                              "queries.jsonl": '{"_id": "q1", "text": "what?"}\n',
                                              "qrels/test.tsv": "query-id\tcorpus-id\tscore\nq1\td1\t1\n"})
    with pytest.raises(SourceError, match=problem.replace(".", r"\.")):
        read_beir(folder)
