"""Hostile dataset fields and encodings: lone surrogates, invisible and look-alike identifiers, names that read as
options, UTF-16/UTF-32 files, too many cases. Each is refused by the CLI (exit 2) naming the file, the field and
the problem, with nothing written (docs/design.md §2.2, §2.4); the same bodies through a real server are in
``test_hostile_datasets.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rag_pipeline.evaluation.datasets.load import DatasetError, parse_dataset
from rag_pipeline_tests.eval_helpers import table_counts
from rag_pipeline_tests.reliability.test_hostile_files import assert_clear_user_error, cli

U1 = "00000000-0000-0000-0000-000000000001"
U2 = "00000000-0000-0000-0000-000000000002"


def case(**fields) -> dict:
    return {"case_id": "c1", "question": "how are backups tested?", "relevant_chunk_ids": [U1], "k": 5, **fields}


def doc(cases: list[dict], **top) -> bytes:
    """A dataset file; ``\\udfff`` written as a JSON escape (json.dumps escapes lone surrogates)."""
    return json.dumps({"knowledge_base": "kb", **top, "cases": cases}).encode()


# name -> (file bytes, the field the message names (None: the file), a fragment of the message)
HOSTILE_FIELDS: dict[str, tuple[bytes, str | None, str]] = {
    "case_id_lone_surrogate": (doc([case(case_id="id\udfff")]), "case_id", "unpaired UTF-16 surrogate"),
    "label_key_lone_surrogate": (doc([case(relevant_chunk_ids={f"{U1}\udfff": 1})]),
                                 f"relevant_chunk_ids.{U1}\udfff", "is not a UUID"),
    "label_lone_surrogate": (doc([case(relevant_chunk_ids=[f"\udfff{U1}"])]), "relevant_chunk_ids[0]",
                             "is not a UUID"),
    "metadata_lone_surrogate": (doc([case()], metadata={"note": "a\udfffb"}), "metadata.note",
                                "unpaired UTF-16 surrogate"),
    "metadata_key_lone_surrogate": (doc([case()], metadata={"k\udfff": 1}), "metadata.k\\udfff",
                                    "the key contains an unpaired UTF-16 surrogate"),
    "metadata_nul": (doc([case()], metadata={"note": "a\x00b"}), "metadata.note", "NUL"),
    "metadata_nested_nul": (doc([case()], metadata={"a": [{"b": "\x00"}]}), "metadata.a[0].b", "NUL"),
    "case_id_zero_width_only": (doc([case(case_id="\u200b")]), "case_id", "only invisible characters"),
    "case_id_zero_width_inside": (doc([case(case_id="c\u200b1")]), "case_id", "invisible character \\u200b"),
    "case_id_word_joiner": (doc([case(case_id="c\u20601")]), "case_id", "invisible character \\u2060"),
    "case_id_bidi_override": (doc([case(case_id="c\u202e1")]), "case_id", "invisible character \\u202e"),
    "case_id_control": (doc([case(case_id="c\x011")]), "case_id", "control character \\u0001"),
    "case_id_escape": (doc([case(case_id="c\x1b[2J")]), "case_id", "control character \\u001b"),
    "question_zero_width_only": (doc([case(question="\u200b\u200b")]), "question", "only invisible characters"),
    "question_bom_only": (doc([case(question="\ufeff")]), "question", "only invisible characters"),
    "case_id_nfc_nfd_twins": (doc([case(case_id="caf\u00e9"), case(case_id="cafe\u0301")]), "case_id",
                              "duplicate case_id; first used by cases[0]"),
    "case_id_trailing_space_twins": (doc([case(case_id="c1"), case(case_id="c1 ")]), "case_id",
                                     "duplicate case_id; first used by cases[0]"),
    "case_id_leading_tab_twins": (doc([case(case_id="c1"), case(case_id="\tc1")]), "case_id",
                                  "duplicate case_id; first used by cases[0]"),
    "name_field_option": (doc([case()], name="-rf"), "name", "starts with '-'"),
    "too_many_cases": (b"[" + b"0," * 100_000 + b"0]", "cases", "more than 100000 cases"),
    "utf32_le_bom": (("\ufeff" + json.dumps([case()])).encode("utf-32-le"), None, "UTF-32 encoded"),
    "utf32_be_no_bom": (json.dumps([case()]).encode("utf-32-be"), None, "UTF-32 encoded"),
    "utf32_le_no_bom": (json.dumps([case()]).encode("utf-32-le"), None, "UTF-32 encoded"),
    "utf32_bom_python": (json.dumps([case()]).encode("utf-32"), None, "UTF-32 encoded"),
    "utf16_be_no_bom": (json.dumps([case()]).encode("utf-16-be"), None, "UTF-16 encoded"),
    "utf16_le_no_bom": (json.dumps([case()]).encode("utf-16-le"), None, "UTF-16 encoded"),
}


@pytest.mark.parametrize("name", HOSTILE_FIELDS)
def test_a_hostile_field_is_exit_2_naming_the_field_and_writes_nothing(engine, capsys, tmp_path: Path,
                                                                       name: str) -> None:
    raw, field, fragment = HOSTILE_FIELDS[name]
    stem = "rf" if name == "name_field_option" else name
    path = tmp_path / f"{stem}.json"
    path.write_bytes(raw)
    with pytest.raises(DatasetError) as info:
        parse_dataset(raw, source=path.name, knowledge_base="kb", name=None if stem == "rf" else stem)
    problems = [p for p in info.value.problems if fragment in p.message]
    assert problems, str(info.value)
    if field is not None:
        printed = problems[0].field.encode("utf-8", "backslashreplace").decode()
        assert printed == field.encode("utf-8", "backslashreplace").decode(), (problems[0].field, field)
    before = table_counts(engine)
    rc, out, err = cli(capsys, "evaluate", "--dataset", str(path), "--knowledge-base", "kb")
    if stem == "rf":  # the file's own name field differs from its stem: refused too, naming the field
        fragment = "differs from the file name"
    assert_clear_user_error(rc, out, err, path.name, fragment.split(";")[0].replace("\\\\", "\\"))
    if field is not None:
        assert f"field '{field.split('.')[0].split('[')[0]}" in err, err
    assert table_counts(engine) == before


@pytest.mark.parametrize("name", ["-rf", "--help", "-"])
def test_a_name_that_reads_as_an_option_is_refused(name: str) -> None:
    with pytest.raises(DatasetError, match="starts with '-'"):
        parse_dataset(doc([case()]), source="x.json", name=name)


def test_identifiers_are_stored_nfc_normalised_and_stripped() -> None:
    dataset = parse_dataset(doc([case(case_id=" cafe\u0301 ")]), source="x.json", default_name="caf\u0065\u0301")
    assert dataset.cases[0].case_id == "caf\u00e9"
    assert dataset.name == "caf\u00e9"
    same = parse_dataset(doc([case(case_id="caf\u00e9")]), source="x.json", default_name="caf\u00e9")
    assert same.content_hash == dataset.content_hash
