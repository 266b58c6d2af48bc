"""Dataset format, no database: graded labels, unchanged binary versions, the name rule, metadata, the
JSON Schema. (Malformed graded files are in the ``bad_datasets`` corpus of ``test_dataset.py``.)"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from rag_pipeline.contracts.dataset import dataset_json_schema
from rag_pipeline.evaluation.datasets import load as ds
from rag_pipeline.evaluation.datasets.load import DatasetError, EvaluationCase, load_dataset, parse_dataset
from rag_pipeline.evaluation.metrics import evaluate_retrieval

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "schemas" / "evaluation-dataset-v1.json"
DATASET_SCHEMA = dataset_json_schema()  # formerly evaluation.dataset_schema.DATASET_SCHEMA, now generated
DATA = ROOT / "rag_pipeline_tests" / "data"
U1 = "30465673-88ea-41f0-a5a0-da496592f3df"
U2 = "41576784-99fb-42a1-b6b1-eb5a7a3a04e0"
U3 = "52687895-aa0c-43b2-87c2-fc6b8b4b15f1"

# Versions stored before graded labels existed: the list form's canonical JSON must never change. The demo
# dataset's own version changed when it gained answer fields (its version from before is pinned, on a copy of
# that file, in test_answer_fields.py).
DEMO_HASH = "00ff758d114cbde8cef6e43a39560b0f71d7d35827a1b9fe89a72a90ca425e92"
SEED_ARRAY_HASH = "4dccd35b871d0137fa9c0fe33bd6eb17d59338cdd83eb9a2c84b7473590272e7"
BOM_HASH = "c5fc986f7d5aa95e9ba9bc97fda1fc6d5ad23a4cda0c4856ee4072b64e1ff574"


def _graded(**kw) -> dict:
    return {"knowledge_base": "kb", "cases": [
        {"case_id": "g", "question": "q", "relevant_chunk_ids": {U1: 3, U2: 0, U3.upper(): 1}, "k": 5},
        {"case_id": "b", "question": "q", "relevant_chunk_ids": [U2], "k": 2}], **kw}


def test_binary_dataset_versions_are_unchanged():
    assert load_dataset(ROOT / "datasets" / "demo.json").content_hash == DEMO_HASH
    assert load_dataset(DATA / "good_datasets" / "seed_array.json", knowledge_base="kb").content_hash == SEED_ARRAY_HASH
    assert load_dataset(DATA / "good_datasets" / "bom.json").content_hash == BOM_HASH
    case = load_dataset(ROOT / "datasets" / "demo.json").cases[0]
    assert not case.is_graded and case.judgments is None
    assert case.grades == case.relevance == dict.fromkeys(case.relevant_chunk_ids, 1)
    assert case.as_dict()["relevant_chunk_ids"] == list(case.relevant_chunk_ids)


def test_graded_case_keeps_grade_zero_but_counts_only_grades_from_one():
    data = parse_dataset(json.dumps(_graded()), name="g")
    graded, binary = data.cases
    assert graded.is_graded and not binary.is_graded and data.is_graded
    assert graded.relevant_chunk_ids == (U1, U3), "grade >= 1 only, ids lower-cased, in id order"
    assert graded.judgments == ((U1, 3), (U2, 0), (U3, 1))
    assert graded.grades == {U1: 3, U2: 0, U3: 1}
    assert graded.relevance == {U1: 3, U3: 1}
    assert (graded.grade(U2), graded.grade(U1.upper()), graded.grade("nope")) == (0, 3, None)
    assert graded.as_dict()["relevant_chunk_ids"] == {U1: 3, U2: 0, U3: 1}, "canonical: the object, 0 kept"
    assert binary.as_dict()["relevant_chunk_ids"] == [U2]
    for case in data.cases:
        assert EvaluationCase.from_dict(json.loads(json.dumps(case.as_dict()))) == case
    # grade 0 is not relevant to any metric: a ranking of only the grade-0 chunk scores 0
    assert evaluate_retrieval([U2], graded.relevance, 5).model_dump() == dict.fromkeys(
        evaluate_retrieval([U2], graded.relevance, 5).model_dump(), 0.0)


def test_graded_version_is_the_object_whatever_its_key_order():
    reordered = _graded()
    reordered["cases"][0]["relevant_chunk_ids"] = {U3: 1, U2: 0, U1: 3}
    a, b = parse_dataset(json.dumps(_graded()), name="g"), parse_dataset(json.dumps(reordered), name="g")
    assert a.content_hash == b.content_hash
    as_list = _graded()
    as_list["cases"][0]["relevant_chunk_ids"] = [U1, U3]
    assert parse_dataset(json.dumps(as_list), name="g").content_hash != a.content_hash, "grades are content"
    regraded = _graded()
    regraded["cases"][0]["relevant_chunk_ids"] = {U1: 2, U2: 0, U3: 1}
    assert parse_dataset(json.dumps(regraded), name="g").content_hash != a.content_hash


def test_inconsistent_case_objects_are_refused():
    with pytest.raises(ValueError, match="grade >= 1"):
        EvaluationCase("c", "q", (U1, U2), 3, ((U1, 2), (U2, 0)))


def test_every_grade_problem_of_a_file_at_once(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"knowledge_base": "kb", "cases": [
        {"case_id": "a", "question": "q", "relevant_chunk_ids": {U1: -1, "x": 1}, "k": 5},
        {"case_id": "b", "question": "q", "relevant_chunk_ids": {U1: 0}, "k": 5},
        {"case_id": "c", "question": "q", "relevant_chunk_ids": {U1: 10, U2: 1}, "k": 5}]}))
    with pytest.raises(DatasetError) as info:
        load_dataset(path)
    got = [(p.case_index, p.case_id, p.field) for p in info.value.problems]
    assert got == [(0, "a", f"relevant_chunk_ids.{U1}"), (0, "a", "relevant_chunk_ids.x"),
                   (1, "b", "relevant_chunk_ids")]
    assert all(line.strip().startswith(str(path)) for line in str(info.value).splitlines()[1:])


def test_name_is_the_file_stem(tmp_path):
    cases = _graded()["cases"]
    ok = tmp_path / "foo.json"
    ok.write_text(json.dumps({"name": "foo", "knowledge_base": "kb", "cases": cases}))
    assert load_dataset(ok).name == "foo"
    unnamed = tmp_path / "bar.json"
    unnamed.write_text(json.dumps({"knowledge_base": "kb", "cases": cases}))
    assert load_dataset(unnamed).name == "bar"
    wrong = tmp_path / "foo2.json"
    wrong.write_text(json.dumps({"name": "demo", "knowledge_base": "kb", "cases": cases}))
    with pytest.raises(DatasetError) as info:
        load_dataset(wrong)
    assert str(info.value) == (
        f"invalid dataset {wrong}: field 'name': 'demo' differs from the file name 'foo2': a dataset is "
        "identified by its file name; rename the file or change the field")


def test_parse_dataset_takes_the_name_from_its_argument():
    raw = json.dumps({"name": "demo", "knowledge_base": "kb", "cases": _graded()["cases"]})
    assert parse_dataset(raw, name="demo").name == "demo"
    assert parse_dataset(raw, default_name="demo").name == "demo"
    assert parse_dataset(raw).name == "demo", "no name given: the field"
    assert parse_dataset(json.dumps(_graded())).name == "dataset"
    for kwargs in ({"name": "upload"}, {"default_name": "upload"}):
        with pytest.raises(DatasetError, match="'demo' differs from the file name 'upload'"):
            parse_dataset(raw, source="upload.json", **kwargs)


@pytest.mark.parametrize("stem", ["a,b", "a|b", "a[1]", "a...b", "tab\there", "x" * 201])
def test_a_name_must_be_a_partition_key(tmp_path, stem):
    assert not ds.valid_dataset_key(stem)
    path = tmp_path / f"{stem}.json"
    path.write_text(json.dumps(_graded()))
    with pytest.raises(DatasetError, match="is not a valid dataset name"):
        load_dataset(path)
    with pytest.raises(DatasetError, match="is not a valid dataset name|the limit is 200"):
        parse_dataset(json.dumps({"name": stem, **_graded()}))


def test_the_sensor_uses_the_same_key_rule():
    from rag_pipeline.defs import sensors

    assert sensors.valid_dataset_key is ds.valid_dataset_key
    assert ds.valid_dataset_key("demo") and ds.valid_dataset_key("scifact@0001") and not ds.valid_dataset_key("")


def test_metadata_is_free_form_and_not_part_of_the_version():
    meta = {"skipped": {"queries": ["q1", "q7"], "documents": []}, "source": "beir", "n": 3.5}
    with_meta = parse_dataset(json.dumps(_graded(metadata=meta)), name="g")
    assert with_meta.metadata == meta
    assert with_meta.content_hash == parse_dataset(json.dumps(_graded()), name="g").content_hash
    assert parse_dataset(json.dumps(_graded(metadata=None)), name="g").metadata is None


def test_metadata_over_one_megabyte_is_refused():
    meta = {"skipped": ["x" * 1000] * 1100}
    with pytest.raises(DatasetError) as info:
        parse_dataset(json.dumps(_graded(metadata=meta)), name="g")
    (problem,) = info.value.problems
    assert problem.field == "metadata" and "the limit is 1,048,576 (1 MB)" in problem.message


def test_the_published_schema_is_the_generated_one():
    regenerate = ("python -c 'import json; from rag_pipeline.contracts.dataset import dataset_json_schema as s; "
                  f"print(json.dumps(s(), indent=2, ensure_ascii=False))' > schemas/{SCHEMA_FILE.name}")
    assert json.loads(SCHEMA_FILE.read_text(encoding="utf-8")) == DATASET_SCHEMA, f"stale; regenerate: {regenerate}"


def test_json_schema_accepts_the_demo_and_graded_files_and_rejects_bad_grades():
    jsonschema.Draft202012Validator.check_schema(DATASET_SCHEMA)
    jsonschema.validate(json.loads((ROOT / "datasets" / "demo.json").read_text(encoding="utf-8")), DATASET_SCHEMA)
    jsonschema.validate(_graded(name="g", description="graded", metadata={"skipped": []}), DATASET_SCHEMA)
    for path in sorted((DATA / "good_datasets").glob("*.json")):
        jsonschema.validate(json.loads(path.read_text(encoding="utf-8-sig")), DATASET_SCHEMA)
    for grades in ({U1: -1}, {U1: 11}, {U1: "2"}, {U1: True}, {U1: 0, U2: 0}, {"doc-1": 1}, {}):
        bad = _graded()
        bad["cases"][0]["relevant_chunk_ids"] = grades
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, DATASET_SCHEMA)
        with pytest.raises(DatasetError):
            parse_dataset(json.dumps(bad))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_graded(name="a,b"), DATASET_SCHEMA)
