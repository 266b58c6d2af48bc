"""The labelling tools keep a case's answer fields and take unanswerable cases (docs/design.md §12.1): a draft
read from a dataset exports the same dataset; ``check-dataset`` and ``fix-labels`` on a real database."""

from __future__ import annotations

import json

import pytest

from rag_pipeline.cli import main
from rag_pipeline.contracts.labelling import Draft
from rag_pipeline.evaluation.datasets.load import load_dataset, parse_dataset
from rag_pipeline.service.labelling.drafts import export_cases, load_draft, read_questions, save_draft
from rag_pipeline.service.labelling.fixes import fix_labels
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, write_dataset

U1 = "30465673-88ea-41f0-a5a0-da496592f3df"
U2 = "41576784-99fb-42a1-b6b1-eb5a7a3a04e0"
KB = "labels-unanswerable"


def _cases(a: str, b: str) -> list[dict]:
    return [{"case_id": "graded", "question": "q1", "k": 3, "relevant_chunk_ids": {a: 2, b: 0},
             "reference_answers": ["two", "二"], "key_points": ["two"]},
            {"case_id": "plain", "question": "q2", "k": 2, "relevant_chunk_ids": [b]},
            {"case_id": "none", "question": "q3", "k": 2, "relevant_chunk_ids": [], "answerable": False,
             "reference_answers": ["信息不足"]},
            {"case_id": "judged-zero", "question": "q4", "k": 2, "relevant_chunk_ids": {a: 0},
             "answerable": False}]


def _draft_round_trip(tmp_path, path, binary: bool = False):
    questions = read_questions(path, "kb", 10)
    draft = Draft(knowledge_base="kb", name="x", strategies=["hybrid-v1"], depth=5, created_at="2026-01-01T00:00:00Z",
                  questions=questions)
    save_draft(draft, tmp_path / "d.json")
    return json.loads((tmp_path / "d.json").read_text(encoding="utf-8")), export_cases(
        load_draft(tmp_path / "d.json"), binary=binary)


def test_a_draft_read_from_a_dataset_exports_the_same_dataset(tmp_path):
    path = write_dataset(tmp_path / "x.json", "kb", _cases(U1, U2), name="x")
    original = load_dataset(path)
    raw, (cases, left_out) = _draft_round_trip(tmp_path, path)
    assert left_out == []
    assert "answerable" not in raw["questions"][0] and "reference_answers" not in raw["questions"][1]
    assert raw["questions"][2]["answerable"] is False, "only the fields that are set are written"
    exported = parse_dataset(json.dumps({"knowledge_base": "kb", "cases": cases}), name="x")
    assert exported.cases == original.cases and exported.content_hash == original.content_hash


def test_an_unanswerable_question_judged_relevant_is_left_out_with_the_reason(tmp_path):
    path = write_dataset(tmp_path / "x.json", "kb", _cases(U1, U2), name="x")
    questions = read_questions(path, "kb", 10)
    questions[3].candidates[0].grade = 2
    draft = Draft(knowledge_base="kb", strategies=[], depth=5, created_at="2026-01-01T00:00:00Z", questions=questions)
    cases, left_out = export_cases(draft)
    assert [c["case_id"] for c in cases] == ["graded", "plain", "none"]
    assert left_out == [("judged-zero", "marked unanswerable but a candidate is judged relevant: judge it 0 or drop "
                                        "\"answerable\": false")]


@pytest.mark.db  # ingests a tiny knowledge base: check-dataset and fix-labels read its chunks
def test_check_dataset_and_fix_labels_take_unanswerable_cases(engine, tmp_path, capsys):
    chunks = ingest_tiny_kb(engine, KB, tmp_path / "docs")
    path = write_dataset(tmp_path / "x.json", KB, _cases(chunks["backup.md"], chunks["coffee.md"]), name="labels-x")
    assert main(["check-dataset", "--dataset", str(path), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["case_id"], r["status"]) for r in rows] == [("graded", "ok"), ("plain", "ok")], \
        "the relevant ids of the answerable cases; none for the unanswerable ones"
    out = tmp_path / "labels-x-fixed.json"
    result = fix_labels(engine, path, KB, out)
    assert result.counts.labels == 4 and result.counts.ok == 4, "every judged id, grade 0 included"
    fixed = load_dataset(out)
    assert fixed.content_hash == load_dataset(path).content_hash, "nothing to fix: the same cases, answer fields kept"


@pytest.mark.db  # ingests a tiny knowledge base: fix-labels maps a document id to the document's only chunk
def test_fix_labels_remaps_the_judgments_and_keeps_the_rule_labels(engine, tmp_path):
    import sqlalchemy as sa

    from rag_pipeline.evaluation.datasets.judgments import Judgment, resolved_labels

    kb = KB + "-judged"
    chunks = ingest_tiny_kb(engine, kb, tmp_path / "docs")
    with engine.connect() as conn:
        doc_id = str(conn.execute(sa.text(
            "SELECT d.id FROM documents d JOIN knowledge_bases k ON k.id = d.knowledge_base_id "
            "WHERE k.name = :kb AND d.original_name LIKE '%coffee.md'"), {"kb": kb}).scalar_one())
    backup = chunks["backup.md"]
    judged = [Judgment("ann", doc_id, 2), Judgment("bo", doc_id, 1), Judgment("ann", backup, 0),
              Judgment("bo", backup, 1), Judgment("lead", backup, 1, adjudicated=True)]
    case = {"case_id": "j", "question": "q", "k": 3, "relevant_chunk_ids": resolved_labels(judged),
            "judgments": [j.as_dict() for j in judged]}
    path = tmp_path / "labels-j.json"
    path.write_text(json.dumps({"knowledge_base": kb, "annotators": ["ann", "bo", "lead"], "cases": [case]}))
    out = tmp_path / "labels-j-fixed.json"
    result = fix_labels(engine, path, kb, out)
    assert result.counts.fixed == 1
    (fixed,) = load_dataset(out).cases
    assert fixed.grades == {chunks["coffee.md"]: 1, backup: 1}  # the tie 2/1 resolves to the lower grade
    assert sorted((j.annotator, j.chunk_id) for j in fixed.annotator_judgments) == sorted(
        (j.annotator, chunks["coffee.md"] if j.chunk_id == doc_id else j.chunk_id) for j in judged)
