"""The label draft (no database): validation with the field named, export forms, and the terminal labeller's keys
(every change saved, resumable)."""

from __future__ import annotations

import json

import pytest

from rag_pipeline.cli.label_terminal import Labeller
from rag_pipeline.contracts.labelling import Draft
from rag_pipeline.evaluation.datasets.load import parse_dataset
from rag_pipeline.service.labelling.drafts import DraftError, export_cases, load_draft, pool_order, save_draft

ID = "00000000-0000-4000-8000-{:012d}"


def draft(n_questions: int = 3, n_candidates: int = 3) -> Draft:
    return Draft.model_validate({
        "knowledge_base": "kb", "name": "ds", "strategies": ["a", "b"], "depth": 3, "created_at": "2026-11-30",
        "questions": [{"case_id": f"q-{q}", "question": f"question {q}?", "k": 5, "candidates": [
            {"chunk_id": ID.format(q * 10 + c), "document_id": "d", "document_name": "doc.md", "ordinal": c,
             "char_start": 0, "char_end": 10, "text": f"text {c}", "found_by": {"a": c + 1}}
            for c in range(n_candidates)]} for q in range(n_questions)]})


def test_pool_order_prefers_agreement_then_the_best_rank():
    assert sorted([{"a": 1}, {"a": 2, "b": 2}, {"b": 3}], key=pool_order) == [{"a": 2, "b": 2}, {"a": 1}, {"b": 3}]


def test_labeller_keys_change_grades_save_and_resume(tmp_path):
    path = tmp_path / "d.draft.json"
    d = draft()
    save_draft(d, path)
    s = Labeller(d, path)
    for key in ["2", "0", "k", " ", "n", "3", "s", "b", "down", "u"]:
        s.press(key)
    saved = load_draft(path)  # every key was saved
    assert [c.grade for c in saved.questions[0].candidates] == [2, 1, None]  # space toggled the 0 back to 1
    assert [c.grade for c in saved.questions[1].candidates] == [3, None, None]
    assert [q.status for q in saved.questions] == ["judged", "skipped", "pending"] and saved.position == 1
    assert "question 1?" in s.screen() and "[3]" in s.screen()
    s.press("n"), s.press("n")  # past the last question: the end screen
    s.press("?")
    assert s.at_end and "last question" in s.message
    s.press("b")  # back to the last question, not one before it
    assert not s.at_end and s.draft.position == 2
    s.press("?")
    assert "unknown key" in s.message
    s.press("q")
    assert s.done


def test_export_forms_and_left_out_questions():
    d = draft()
    d.questions[0].candidates[0].grade = 1
    d.questions[1].candidates[0].grade, d.questions[1].candidates[1].grade = 2, 0
    d.questions[2].status = "skipped"
    cases, left = export_cases(d)
    assert cases[0]["relevant_chunk_ids"] == [ID.format(0)]  # grade 1 only: the seed's list form
    assert cases[1]["relevant_chunk_ids"] == {ID.format(10): 2, ID.format(11): 0}
    assert left == [("q-2", "skipped")]
    assert export_cases(d, binary=True)[0][1]["relevant_chunk_ids"] == [ID.format(10)]
    dataset = parse_dataset(json.dumps({"knowledge_base": "kb", "cases": cases}), name="ds")
    assert [c.case_id for c in dataset.cases] == ["q-0", "q-1"]


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["questions"][0]["candidates"][1].update(grade=11), "questions[0].candidates[1].grade"),
    (lambda d: d["questions"][1].pop("question"), "questions[1].question"),
    (lambda d: d.update(position=9), "position: 9 is past the last question"),
    (lambda d: d["questions"][1].update(case_id="q-0"), "case_id 'q-0' is used twice"),
    (lambda d: d.update(format="other"), "not a label draft"),
])
def test_an_edited_draft_is_refused_naming_the_field(tmp_path, edit, message):
    data = draft().model_dump()
    edit(data)
    path = tmp_path / "bad.draft.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(DraftError, match="invalid draft") as err:
        load_draft(path)
    assert message in str(err.value)


def test_the_labeller_shows_the_chunk_text_with_its_line_breaks(tmp_path):
    d = draft()
    d.questions[0].candidates[0].text = "# Coffee\n\n\n\nRoast\tfor 12 minutes.\nCool it.\x07\n"
    screen = Labeller(d, tmp_path / "d.draft.json").screen()
    assert "\\x0a" not in screen and "\\x09" not in screen
    assert "# Coffee\n\nRoast for 12 minutes.\nCool it.\\x07\n" in screen  # one blank line kept, a bell escaped
