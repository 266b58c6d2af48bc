"""The answer fields of a dataset case (docs/design.md §12.1): ``reference_answers``, ``answerable``,
``key_points``; versions of files without them unchanged, the canonical case, the JSON Schema, the stored
version. (Malformed answer fields are in the ``bad_datasets`` corpus of ``test_dataset.py``.)"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from rag_pipeline.contracts.dataset import MAX_REFERENCE_ANSWER_CHARS, MAX_REFERENCE_ANSWERS, dataset_json_schema
from rag_pipeline.evaluation.datasets.load import DatasetError, EvaluationCase, load_dataset, parse_dataset
from rag_pipeline.evaluation.runs import results as persistence

DATA = Path(__file__).resolve().parents[1] / "data" / "good_datasets"
U1 = "30465673-88ea-41f0-a5a0-da496592f3df"
U2 = "41576784-99fb-42a1-b6b1-eb5a7a3a04e0"
U3 = "52687895-aa0c-43b2-87c2-fc6b8b4b15f1"
SCHEMA = jsonschema.Draft202012Validator(dataset_json_schema())

# Taken before the answer fields existed: datasets/demo.json as it was, and a graded file.
DEMO_BEFORE_ANSWERS_HASH = "62d06053bfff57c02939f5ab96ed9f63ded0468b47ca5e6176657ec3254d902e"
GRADED_HASH = "43e9bc877dc9756c7fa9e42cd1d05535e0e2c3d2acfb019e67ef8fd839a589d1"


def _with_answers() -> dict:
    return {"knowledge_base": "kb", "cases": [
        {"case_id": "a", "question": "When is a flaky test quarantined?", "relevant_chunk_ids": [U1], "k": 5,
         "reference_answers": ["after three flaky runs in seven days", "三次"], "key_points": ["three flaky runs"]},
        {"case_id": "u", "question": "What is the CEO's phone number?", "relevant_chunk_ids": [], "k": 5,
         "answerable": False},
        {"case_id": "z", "question": "q", "relevant_chunk_ids": {U2: 0}, "k": 5, "answerable": False,
         "reference_answers": ["信息不足"]}]}


def test_versions_of_files_without_the_answer_fields_are_unchanged():
    before = (DATA / "demo_before_answers.json").read_bytes()
    assert parse_dataset(before, name="demo").content_hash == DEMO_BEFORE_ANSWERS_HASH
    graded = {"knowledge_base": "kb", "cases": [
        {"case_id": "g", "question": "q", "relevant_chunk_ids": {U1: 3, U2: 0, U3.upper(): 1}, "k": 5},
        {"case_id": "b", "question": "q", "relevant_chunk_ids": [U2], "k": 2}]}
    assert parse_dataset(json.dumps(graded), name="g").content_hash == GRADED_HASH
    # the defaults written out are no change either
    explicit = copy.deepcopy(graded)
    explicit["cases"][1]["answerable"] = True
    assert parse_dataset(json.dumps(explicit), name="g").content_hash == GRADED_HASH


def test_answer_fields_are_read_and_part_of_the_version():
    data = parse_dataset(json.dumps(_with_answers()), name="x")
    a, u, z = data.cases
    assert a.reference_answers == ("after three flaky runs in seven days", "三次") and a.answerable
    assert a.key_points == ("three flaky runs",)
    assert (u.answerable, u.relevant_chunk_ids, u.reference_answers, u.key_points) == (False, (), (), ())
    assert (z.answerable, z.relevant_chunk_ids, z.judgments) == (False, (), ((U2, 0),))
    assert u.as_dict() == {"case_id": "u", "question": "What is the CEO's phone number?",
                           "relevant_chunk_ids": [], "k": 5, "answerable": False}
    assert "answerable" not in a.as_dict() and a.as_dict()["reference_answers"] == list(a.reference_answers)
    for case in data.cases:
        assert EvaluationCase.from_dict(json.loads(json.dumps(case.as_dict()))) == case
    for change in (lambda c: c[0].update(reference_answers=["three"]), lambda c: c[0].pop("key_points"),
                   lambda c: c[1].update(answerable=True, relevant_chunk_ids=[U1])):
        changed = _with_answers()
        change(changed["cases"])
        assert parse_dataset(json.dumps(changed), name="x").content_hash != data.content_hash


def test_limits_of_the_answer_fields():
    many = _with_answers()
    many["cases"][0]["reference_answers"] = ["x"] * (MAX_REFERENCE_ANSWERS + 1)
    many["cases"][0]["key_points"] = ["y" * (MAX_REFERENCE_ANSWER_CHARS + 1)]
    with pytest.raises(DatasetError) as info:
        parse_dataset(json.dumps(many), source="m.json", name="m")
    assert [(p.case_id, p.field) for p in info.value.problems] == [("a", "reference_answers"),
                                                                   ("a", "key_points[0]")]
    assert f"has {MAX_REFERENCE_ANSWERS + 1} reference answers; the limit is {MAX_REFERENCE_ANSWERS}" in str(info.value)
    assert "is 2,001 characters; the limit is 1,000" in str(info.value)


def test_json_schema_agrees_with_the_validator():
    good = _with_answers()
    SCHEMA.validate(good)
    parse_dataset(json.dumps(good), name="x")
    bad = []
    for change in (lambda c: c[1].pop("answerable"), lambda c: c[1].update(answerable=True),
                   lambda c: c[2].pop("answerable"), lambda c: c[0].update(reference_answers=[]),
                   lambda c: c[0].update(reference_answers=[" "]), lambda c: c[0].update(key_points=None),
                   lambda c: c[1].update(answerable="false"), lambda c: c[0].update(relevant_chunk_ids={}),
                   lambda c: c[1].update(relevant_chunk_ids=[U1]), lambda c: c[2].update(relevant_chunk_ids={U2: 1})):
        doc = _with_answers()
        change(doc["cases"])
        bad.append(doc)
    for doc in bad:
        assert not SCHEMA.is_valid(doc), doc
        with pytest.raises(DatasetError):
            parse_dataset(json.dumps(doc), name="x")
    SCHEMA.validate(json.loads((DATA / "demo_before_answers.json").read_text(encoding="utf-8")))
    SCHEMA.validate(json.loads((DATA.parents[2] / "datasets" / "demo.json").read_text(encoding="utf-8")))


@pytest.mark.db  # stores a dataset version and reads it back
def test_answer_fields_survive_the_stored_version(engine, tmp_path):
    path = tmp_path / "answers-roundtrip.json"
    path.write_text(json.dumps(_with_answers(), ensure_ascii=False), encoding="utf-8")
    dataset = load_dataset(path)
    with engine.begin() as conn:
        dataset_id = persistence.store_dataset(conn, dataset, "kb")
    with engine.connect() as conn:
        stored = persistence.load_stored_dataset(conn, dataset_id)
    assert stored.cases == dataset.cases and stored.content_hash == dataset.content_hash
    assert [c.answerable for c in stored.cases] == [True, False, False]
