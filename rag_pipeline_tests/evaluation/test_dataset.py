"""Dataset validation: a corpus of malformed files, each error naming file, case and field; nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rag_pipeline.contracts.dataset import MAX_CASES  # moved from evaluation.dataset
from rag_pipeline.evaluation.datasets import load as ds
from rag_pipeline.evaluation.datasets.load import DatasetError, load_dataset, parse_dataset
from rag_pipeline_tests.eval_helpers import table_counts

DATA = Path(__file__).resolve().parent.parent / "data"
BAD = DATA / "bad_datasets"
GOOD = DATA / "good_datasets"
U1 = "30465673-88ea-41f0-a5a0-da496592f3df"
U2 = "41576784-99fb-42a1-b6b1-eb5a7a3a04e0"
U3 = "52687895-aa0c-43b2-87c2-fc6b8b4b15f1"

# file -> expected problems: (case_index, case_id, field, fragment of the message)
EXPECTED: dict[str, list[tuple]] = {
    "invalid_json_trailing_comma.json": [(None, None, None, "invalid JSON at line 11, column 5")],
    "invalid_json_unclosed.json": [(None, None, None, "invalid JSON at line 12")],
    "invalid_json_single_quotes.json": [(None, None, None, "invalid JSON at line 1, column 3")],
    "empty.json": [(None, None, None, "file is empty")],
    "raw_nul_in_string.json": [(None, None, None, "a raw control character U+0000 inside a string; write it escaped")],
    "k_5001_digits.json": [(None, None, None, "a number has more than 4300 digits")],
    "whitespace_only.json": [(None, None, None, "file is empty")],
    "bom_with_bad_k.json": [(0, "c1", "k", "must be between 1 and 1000, got 0")],
    "latin1_bytes.json": [(None, None, None, "not valid UTF-8: byte 0xe9")],
    "utf16.json": [(None, None, None, "UTF-16")],
    "object_without_cases.json": [(None, None, "cases", "no 'cases' array"),
                                  (None, None, None, "unknown top-level key(s) ['case']")],
    "top_level_string.json": [(None, None, None, "top level must be an array of cases or an object")],
    "cases_not_array.json": [(None, None, "cases", "must be an array of cases, got object")],
    "no_cases.json": [(None, None, "cases", "there are no cases")],
    "bare_array_without_kb.json": [(None, None, "knowledge_base", "no knowledge base")],
    "case_not_object.json": [(1, None, None, "each case must be an object, got array")],
    "judgment_unknown_annotator.json": [(0, "c1", "judgments[1].annotator", "unknown annotator 'carol'; the "
                                         "file's annotators are ['alice', 'bob']")],
    "judgment_grade_out_of_range.json": [(0, "c1", "judgments[1].grade", "grade must be between 0 and 10, got 11")],
    "judgment_duplicate.json": [(0, "c1", "judgments[1]", "duplicate judgment: 'alice' already judged chunk "
                                 f"{U1} in judgments[0]")],
    "judgment_labels_disagree.json": [(0, "c1", "relevant_chunk_ids", f'it must be {{"{U1}": 1, "{U2}": 0}}')],
    "missing_fields.json": [(0, "c1", "question", "is missing"), (0, "c1", "k", "is missing")],
    "extra_field.json": [(0, "c1", "answer", "unknown field")],
    "unknown_top_level_key.json": [(None, None, None, "unknown top-level key(s) ['version']")],
    "wrong_types.json": [(0, None, "case_id", "must be a string, got integer 17"),
                         (0, None, "question", "must be a string, got array"),
                         (0, None, "relevant_chunk_ids",
                          "must be an array of chunk ids or an object {chunk_id: grade}, got string"),
                         (0, None, "k", 'got string "5"')],
    "name_not_string.json": [(None, None, "name", "must be a string, got integer")],
    "kb_not_string.json": [(None, None, "knowledge_base", "must be a string, got array")],
    "k_zero.json": [(0, "c1", "k", "got 0")],
    "k_negative.json": [(0, "c1", "k", "got -3")],
    "k_float.json": [(0, "c1", "k", "must be an integer between 1 and 1000, got number 5.5")],
    "k_integral_float.json": [(0, "c1", "k", "got number 5.0")],
    "k_string.json": [(0, "c1", "k", 'got string "5"')],
    "k_bool.json": [(0, "c1", "k", "got boolean true")],
    "k_absurd.json": [(0, "c1", "k", "got 1000000000000")],
    "k_null.json": [(0, "c1", "k", "got null")],
    "question_empty.json": [(0, "c1", "question", "must not be empty")],
    "question_whitespace.json": [(0, "c1", "question", "whitespace only")],
    "question_too_long.json": [(0, "c1", "question", "10,004 characters; the limit is 10,000")],
    "question_nul.json": [(0, "c1", "question", "NUL character")],
    "question_lone_surrogate.json": [(0, "c1", "question", "unpaired UTF-16 surrogate")],
    "case_id_empty.json": [(0, "  ", "case_id", "must not be empty")],
    "duplicate_case_id.json": [(2, "dup", "case_id", "duplicate case_id; first used by cases[0]")],
    "relevant_ids_empty.json": [(0, "c1", "relevant_chunk_ids", "is empty")],
    "relevant_ids_not_array.json": [(0, "c1", "relevant_chunk_ids", "must be an array")],
    "relevant_ids_non_string.json": [(0, "c1", "relevant_chunk_ids[1]", "got integer 123"),
                                     (0, "c1", "relevant_chunk_ids[2]", "got null")],
    "relevant_ids_not_uuid.json": [(0, "c1", "relevant_chunk_ids[0]", '"doc-1" is not a UUID'),
                                   (0, "c1", "relevant_chunk_ids[1]", "is not a UUID"),
                                   (0, "c1", "relevant_chunk_ids[2]", "is not a UUID")],
    "relevant_ids_duplicate.json": [(0, "c1", "relevant_chunk_ids[2]", "duplicate id")],
    "nan.json": [(0, "c1", "k", "got non-finite number NaN")],
    "infinity.json": [(0, "a", "k", "non-finite number Infinity"), (1, "b", "k", "non-finite number -Infinity")],
    "number_overflow.json": [(0, "c1", "k", "non-finite number 1e999")],
    "duplicate_keys.json": [(0, "c1", "k", "appears more than once")],
    "grades_negative.json": [(0, "c1", f"relevant_chunk_ids.{U2}", "0 and 10 (0 = judged not relevant), got -1")],
    "grades_above_ten.json": [(0, "c1", f"relevant_chunk_ids.{U1}", "0 and 10 (0 = judged not relevant), got 11")],
    "grades_not_integer.json": [(0, "float", f"relevant_chunk_ids.{U1}",
                                 "must be an integer grade between 0 and 10, got number 2.5"),
                                (1, "integral-float", f"relevant_chunk_ids.{U1}", "got number 2.0"),
                                (2, "bool", f"relevant_chunk_ids.{U1}", "got boolean true"),
                                (3, "string", f"relevant_chunk_ids.{U1}", 'got string "2"'),
                                (4, "null", f"relevant_chunk_ids.{U1}", "got null"),
                                (5, "nan", f"relevant_chunk_ids.{U1}", "got non-finite number NaN"),
                                (6, "array", f"relevant_chunk_ids.{U1}", "got array")],
    "grades_all_zero.json": [(1, "zeros", "relevant_chunk_ids", "every grade is 0; a case needs at least one")],
    "grades_key_not_uuid.json": [(0, "c1", "relevant_chunk_ids.doc-1", '"doc-1" is not a UUID'),
                                 (0, "c1", "relevant_chunk_ids.", '"" is not a UUID')],
    "grades_duplicate_keys.json": [(0, "c1", f"relevant_chunk_ids.{U1}", "appears more than once in this object"),
                                   (1, "c2", f"relevant_chunk_ids.{U1.upper()}",
                                    f"duplicate id '{U1.upper()}' (same as relevant_chunk_ids.{U1})")],
    "grades_empty.json": [(0, "c1", "relevant_chunk_ids", "is empty")],
    "grades_many_problems.json": [(1, "neg", f"relevant_chunk_ids.{U1}", "got -2"),
                                  (2, "big", f"relevant_chunk_ids.{U3}", "got 100"),
                                  (2, "big", f"relevant_chunk_ids.{U1}", "got number 1.5"),
                                  (2, "big", "k", "got 0")],
    "answer_fields_bad.json": [
        (1, "empty-refs", "reference_answers", "is empty; give at least one of the reference answers or leave"),
        (2, "blank-ref", "reference_answers[1]", "must not be empty"),
        (2, "blank-ref", "reference_answers[2]", "must be a string, got integer 7"),
        (3, "refs-string", "reference_answers", 'must be an array of strings, got string "three"'),
        (3, "refs-string", "key_points", "must be an array of strings, got null"),
        (4, "answerable-string", "relevant_chunk_ids", "is empty; every case needs at least one relevant chunk id"),
        (4, "answerable-string", "answerable", 'must be true or false, got string "no"'),
        (5, "answerable-true-empty", "relevant_chunk_ids", 'unless it is unanswerable ("answerable": false)'),
        (5, "answerable-true-empty", "key_points[0]", "must not be empty")],
    "unanswerable_bad_ids.json": [(1, "bad-id", "relevant_chunk_ids[0]", '"doc-1" is not a UUID'),
                                  (1, "bad-id", "relevant_chunk_ids", "an unanswerable case"),
                                  (2, "zeros-answerable", "relevant_chunk_ids", "every grade is 0"),
                                  (4, "relevant-unanswerable", "relevant_chunk_ids",
                                   '("answerable": false) has no relevant chunk: the knowledge base holds no')],
    "name_differs_from_file.json": [(None, None, "name", "'demo' differs from the file name 'name_differs_from_file': "
                                                         "a dataset is identified by its file name; rename the file "
                                                         "or change the field")],
    "metadata_not_object.json": [(None, None, "metadata", "must be an object, got array")],
    "metadata_not_json.json": [(None, None, "metadata.source", "appears more than once"),
                               (None, None, "metadata.skipped.score", "non-finite number NaN is not JSON")],
    "many_problems.json": [(1, "bad-k", "k", "got 0"), (2, "bad-q", "question", "whitespace only"),
                           (3, "bad-ids", "relevant_chunk_ids", "is empty"),
                           (4, "bad-missing", "relevant_chunk_ids", "is missing"),
                           (4, "bad-missing", "k", "is missing"), (5, "ok-1", "case_id", "duplicate case_id")],
}


def test_corpus_is_complete():
    files = {p.name for p in BAD.glob("*.json")}
    assert files == set(EXPECTED), "every malformed file has expectations and vice versa"
    assert len(files) >= 30


def _check(err: DatasetError, path: Path, expected: list[tuple]) -> None:
    text = str(err)
    lines = text.splitlines()
    if len(err.problems) == 1:
        assert lines == [f"invalid dataset {err.problems[0].describe(str(path))}"], "one problem, one line"
    else:
        assert lines[0] == f"invalid dataset {path}: {len(err.problems)} problems"
    assert all(str(path) in line for line in lines), "every line names the file"
    for index, case_id, field, fragment in expected:
        matches = [p for p in err.problems if (p.case_index, p.field) == (index, field) and fragment in p.message]
        assert matches, f"no problem {(index, field, fragment)} in:\n{text}"
        assert matches[0].case_id == case_id
        line = matches[0].describe(str(path))
        assert line in text
        if index is not None:
            assert f"cases[{index}]" in line and (case_id is None or repr(case_id) in line)
        if field is not None:
            assert f"field {field!r}" in line
    assert len(err.problems) == len(expected), text


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_malformed_dataset_lists_every_problem(name):
    path = BAD / name
    with pytest.raises(DatasetError) as info:
        load_dataset(path)
    _check(info.value, path, EXPECTED[name])


def _case(i: int, **kw) -> dict:
    return {"case_id": f"c{i}", "question": f"question {i}", "relevant_chunk_ids": [U1], "k": 5, **kw}


def test_too_many_cases(tmp_path):
    path = tmp_path / "huge.json"
    path.write_text(json.dumps({"knowledge_base": "kb", "cases": [_case(i) for i in range(MAX_CASES + 1)]}))
    with pytest.raises(DatasetError) as info:
        load_dataset(path)
    _check(info.value, path, [(None, None, "cases", "more than 100000 cases; the limit is 100000")])


def test_file_too_large_is_refused_before_reading(tmp_path):
    path = tmp_path / "big.json"
    with path.open("wb") as fp:
        fp.truncate(ds.MAX_FILE_BYTES + 1)
    with pytest.raises(DatasetError) as info:
        load_dataset(path)
    _check(info.value, path, [(None, None, None, "the limit is 50 MB")])


def test_one_megabyte_question(tmp_path):
    path = tmp_path / "long_question.json"
    path.write_text(json.dumps({"knowledge_base": "kb", "cases": [_case(0, question="x" * 1_000_000)]}))
    with pytest.raises(DatasetError) as info:
        load_dataset(path)
    _check(info.value, path, [(0, "c0", "question", "1,000,000 characters")])


def test_deeply_nested_json(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DatasetError) as info:
        load_dataset(path, knowledge_base="kb")
    assert "nested too deeply" in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(DatasetError, match="cannot read the file"):
        load_dataset(tmp_path / "nope.json")


def test_utf8_bom_is_accepted():
    data = load_dataset(GOOD / "bom.json")
    assert (data.name, data.knowledge_base, len(data.cases)) == ("bom", "kb", 1)
    assert data.cases[0].question == "Monorepo架构有什么优势"


def test_seed_array_needs_and_takes_the_knowledge_base():
    data = load_dataset(GOOD / "seed_array.json", knowledge_base="kb")
    assert data.name == "seed_array" and data.knowledge_base == "kb"
    assert data.cases[0].as_dict() == {"case_id": "monorepo-advantages-001", "question": "Monorepo架构有什么优势",
                                       "relevant_chunk_ids": [U1], "k": 6}


def test_knowledge_base_conflict():
    with pytest.raises(DatasetError, match="names knowledge base 'kb' but 'other' was requested"):
        load_dataset(GOOD / "bom.json", knowledge_base="other")


def test_content_hash_is_the_version_of_the_cases():
    cases = [_case(1, relevant_chunk_ids=[U1.upper()]), _case(2)]
    pretty = parse_dataset(json.dumps({"knowledge_base": "kb", "cases": cases}, indent=4).encode())
    compact = parse_dataset(json.dumps(cases).encode(), knowledge_base="kb", name="other-name")
    assert pretty.content_hash == compact.content_hash and len(pretty.content_hash) == 64
    assert pretty.cases[0].relevant_chunk_ids == (U1,), "ids are normalised to lower case"
    changed = parse_dataset(json.dumps([_case(1), _case(2, k=6)]).encode(), knowledge_base="kb")
    assert changed.content_hash != pretty.content_hash


def test_demo_dataset_is_valid():
    data = load_dataset(Path(__file__).resolve().parents[2] / "datasets" / "demo.json")
    assert data.knowledge_base == "demo" and len(data.cases) >= 30


def test_problems_come_in_file_order():
    """Top level first (keys, fields, the caller's name), then each case: duplicate keys, unknown fields, then
    field by field, a graded object key by key; the wording and order the validator has always had."""
    up = U1.upper()
    raw = ('{"zeta": 1, "cases": [{"k": "5", "answer": 1, "question": "  ", "relevant_chunk_ids": '
           f'{{"doc": 11, "{U1}": 0, "{up}": 2.0}}, "case_id": "a", "case_id": "a", "aaa": 2}}, 7, '
           f'{{"case_id": "a", "question": "q", "relevant_chunk_ids": ["{U1}", 3, "{up}"], "k": 0}}], '
           '"knowledge_base": "", "metadata": {"x": NaN}, "name": "ok", "zeta": 2}')
    unknown = ("unknown field; a case has ['case_id', 'question', 'relevant_chunk_ids', 'k'] and optionally "
               "['reference_answers', 'answerable', 'key_points', 'judgments']")
    first = "f.json: cases[0] (case_id 'a'): field"
    third = "f.json: cases[2] (case_id 'a'): field"
    with pytest.raises(DatasetError) as info:
        parse_dataset(raw, source="f.json", name="other")
    assert [line.strip() for line in str(info.value).splitlines()] == [
        "invalid dataset f.json: 19 problems",
        ("f.json: unknown top-level key(s) ['zeta']; allowed: ['name', 'knowledge_base', 'description', 'metadata', "
         "'answer_convention', 'annotators', 'cases']"),
        "f.json: top-level key 'zeta' appears more than once",
        "f.json: field 'knowledge_base': must not be empty",
        "f.json: field 'metadata.x': non-finite number NaN is not JSON",
        ("f.json: field 'name': 'ok' differs from the file name 'other': a dataset is identified by its file name; "
         "rename the file or change the field"),
        f"{first} 'case_id': appears more than once in this case",
        f"{first} 'aaa': {unknown}",
        f"{first} 'answer': {unknown}",
        f"{first} 'question': must not be empty or whitespace only",
        f"{first} 'relevant_chunk_ids.doc': \"doc\" is not a UUID (chunk ids are document_chunks.id, e.g. {U1})",
        f"{first} 'relevant_chunk_ids.doc': grade must be between 0 and 10 (0 = judged not relevant), got 11",
        f"{first} 'relevant_chunk_ids.{up}': duplicate id '{up}' (same as relevant_chunk_ids.{U1})",
        f"{first} 'relevant_chunk_ids.{up}': must be an integer grade between 0 and 10, got number 2.0",
        f"{first} 'k': must be an integer between 1 and 1000, got string \"5\"",
        "f.json: cases[1]: each case must be an object, got integer",
        f"{third} 'case_id': duplicate case_id; first used by cases[0]",
        f"{third} 'relevant_chunk_ids[1]': must be a string chunk id, got integer 3",
        f"{third} 'relevant_chunk_ids[2]': duplicate id '{up}' (same as relevant_chunk_ids[0])",
        f"{third} 'k': must be between 1 and 1000, got 0",
    ]


def test_cli_rejects_every_malformed_file_and_writes_nothing(engine, capsys):
    from rag_pipeline.cli import main

    before = table_counts(engine)
    for name in sorted(EXPECTED):
        path = BAD / name
        assert main(["evaluate", "--dataset", str(path), "--quiet"]) == 2, name
        err = capsys.readouterr().err
        assert err.startswith(f"rag-pipeline: error: invalid dataset {path}"), err
        assert "Traceback" not in err
    assert table_counts(engine) == before
