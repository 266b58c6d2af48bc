"""Answer runs in the database: scored and stored in one transaction, read back equal, filtered and sorted,
re-scored without the answers file, compared, pruned; bad input stores nothing (docs/design.md §12.6)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from rag_pipeline.answers.answers_file import AnswersFileError
from rag_pipeline.answers.runs import persistence
from rag_pipeline.answers.runs.persistence import AnswerRunNotFoundError, answerer_identity, scoring_version
from rag_pipeline.cli import main
from rag_pipeline.contracts.answers import AnswerScoring
from rag_pipeline.contracts.errors import NotFoundError, NotFoundOrInvalidError
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.sources import read_folder
from rag_pipeline.service import answers, retention
from rag_pipeline.service.answer_comparison import compare_answer_runs
from rag_pipeline_tests.eval_helpers import TINY_DOCS, write_dataset


@pytest.fixture
def kb(engine, kb_name, tmp_path) -> dict[str, str]:
    """A tiny knowledge base without embeddings: document name -> its one chunk id."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for doc, text in TINY_DOCS.items():
        (folder / doc).write_text(text + "\n", encoding="utf-8")
    ingest_documents(engine, read_folder(folder), kb_name, chunk_size=500, models=())
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT d.original_name, c.id FROM document_chunks c JOIN documents d ON d.id = c.document_id "
            "JOIN knowledge_bases kb ON kb.id = c.knowledge_base_id WHERE kb.name = :n AND c.is_current"),
            {"n": kb_name}).all()
    return {r.original_name: str(r.id) for r in rows}


def _dataset(tmp_path: Path, kb_name: str, chunks: dict[str, str]) -> Path:
    cases = [
        {"case_id": "backup", "question": "How are backups made?", "k": 3,
         "relevant_chunk_ids": [chunks["backup.md"]], "reference_answers": ["basebackup with continuous archiving"]},
        {"case_id": "coffee", "question": "When is the coffee machine descaled?", "k": 3,
         "relevant_chunk_ids": [chunks["coffee.md"]], "reference_answers": ["descaled every Friday"]},
        {"case_id": "vacation", "question": "年假可以结转几天？", "k": 3,
         "relevant_chunk_ids": [chunks["vacation-zh.md"]], "reference_answers": ["五天"]},
        {"case_id": "salary", "question": "What is the CEO's salary?", "k": 3, "relevant_chunk_ids": [],
         "answerable": False},
    ]
    return write_dataset(tmp_path / f"ans-{kb_name}.json", kb_name, cases)


def _answers(path: Path, chunks: dict[str, str], *, coffee: str = "descaled every Friday",
             answerer: str | None = None) -> Path:
    lines = [
        {"case_id": "backup", "answer": "Basebackup with continuous WAL archiving.",
         "cited_chunk_ids": [chunks["backup.md"]], "retrieved_chunk_ids": [chunks["backup.md"], chunks["coffee.md"]],
         "raw_response": "{\"answer\": \"\u0000\"}"},  # a NUL PostgreSQL could not store: the reply is not kept
        {"case_id": "coffee", "answer": coffee, "cited_chunk_ids": [chunks["onboarding.md"]]},
        {"case_id": "salary", "answer": "信息不足，无法回答。", "refused": True},
    ]
    if answerer:
        lines = [{**line, "answerer": answerer} for line in lines]
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return path


def _counts(engine: sa.Engine) -> tuple[int, int, int]:
    with engine.connect() as conn:
        return tuple(conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one()
                     for t in ("answer_runs", "answer_case_results", "retrieval_evaluation_datasets"))


def test_a_scored_run_is_stored_and_read_back_equal(engine, kb, kb_name, tmp_path):
    dataset = _dataset(tmp_path, kb_name, kb)
    report = answers.evaluate_answers(engine, kb_name, dataset, _answers(tmp_path / "a.jsonl", kb), answerer="bot@7")
    run = report.run
    assert run is not None and (run.answerer, run.answerer_version) == ("bot", "7")
    assert run.dataset == f"ans-{kb_name}" and len(run.knowledge_base_version) == 64
    assert run.scoring == AnswerScoring(convention="auto")  # a "simple" text mode: the per-reference convention
    assert run.scoring_version == scoring_version(AnswerScoring(convention="auto")) == scoring_version(run.scoring)
    assert report.summary.convention == "auto" and report.summary.official is None
    assert (report.summary.cases, report.summary.answered, report.summary.missing_case_ids) == (4, 3, ["vacation"])
    by_id = {c.case_id: c for c in report.cases}
    assert by_id["backup"].verdict == "correct" and by_id["vacation"].status == "missing"
    assert by_id["coffee"].verdict == "citation_miss"  # right answer, its citation is not the relevant chunk
    assert [c.in_knowledge_base for c in by_id["coffee"].citations] == [True]

    stored = answers.get_answer_run(engine, run.run_id[:8])
    assert stored.run == run and stored.summary == report.summary and stored.cases == report.cases
    listed = answers.list_answer_runs(engine, dataset=run.dataset, knowledge_base=kb_name)
    assert listed.total == 1 and listed.runs == [run]
    assert answers.list_answer_runs(engine, dataset=run.dataset, answerer="someone-else").total == 0

    only = answers.get_answer_run(engine, run.run_id, verdict="citation_miss")
    assert [c.case_id for c in only.cases] == ["coffee"]
    ranked = answers.get_answer_run(engine, run.run_id, sort="-citation_precision").cases
    assert [c.case_id for c in ranked][:2] == ["backup", "coffee"]  # 1.0, 0.0, then the undefined ones
    assert all(c.answer_metrics.citation_precision is None for c in ranked[2:])


def test_not_storing_scores_only_and_the_answerer_comes_from_the_file(engine, kb, kb_name, tmp_path):
    dataset = _dataset(tmp_path, kb_name, kb)
    before = _counts(engine)
    report = answers.evaluate_answers(engine, kb_name, dataset, _answers(tmp_path / "a.jsonl", kb), store=False)
    assert report.run is None and report.summary.answered == 3 and _counts(engine) == before
    upload = _answers(tmp_path / "b.jsonl", kb, answerer="filebot").read_bytes()
    run = answers.evaluate_answers(engine, kb_name, dataset, upload, filename="b.jsonl").run
    assert (run.answerer, run.answerer_version) == answerer_identity("filebot")
    with pytest.raises(answers.AnswersRequestError, match="differs from the answerer the file names"):
        answers.evaluate_answers(engine, kb_name, dataset, upload, answerer="other")


def test_a_bad_answers_file_stores_nothing(engine, kb, kb_name, tmp_path):
    dataset = _dataset(tmp_path, kb_name, kb)
    before = _counts(engine)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"case_id": "backup", "answer": "x"}\n{"case_id": "ghost", "answer": "y"}\n', encoding="utf-8")
    with pytest.raises(AnswersFileError,
                       match=r"bad.jsonl: line 2 \(case_id 'ghost'\): field 'case_id': \"ghost\" is not a case"):
        answers.evaluate_answers(engine, kb_name, dataset, bad)
    assert _counts(engine) == before  # not even the dataset version


def test_a_run_that_fails_half_way_leaves_nothing(engine, kb, kb_name, tmp_path):
    """A real database error on the case rows (two rows for one case) rolls back the run row and the dataset."""
    report = answers.evaluate_answers(engine, kb_name, _dataset(tmp_path, kb_name, kb),
                                      _answers(tmp_path / "a.jsonl", kb), store=False)
    before = _counts(engine)
    subject = persistence.RunSubject(dataset_id="", knowledge_base_id="", knowledge_base_version=None,
                                     answerer="a", answerer_version="1", answers_sha256="0" * 64)
    with pytest.raises(sa.exc.IntegrityError, match="answer_case_results_pkey"), engine.begin() as conn:
        dataset_id = conn.execute(sa.text(
            "INSERT INTO retrieval_evaluation_datasets (id, name, knowledge_base_name, content_hash, case_count, "
            "cases) VALUES (gen_random_uuid(), 'half', :kb, 'h', 0, '[]') RETURNING id"), {"kb": kb_name}).scalar()
        kb_id = conn.execute(sa.text("SELECT id FROM knowledge_bases WHERE name = :n"), {"n": kb_name}).scalar()
        subject = dataclasses.replace(subject, dataset_id=str(dataset_id), knowledge_base_id=str(kb_id))
        persistence.store_run(conn, subject, AnswerScoring(), [*report.cases, report.cases[0]], report.summary, {})
    assert _counts(engine) == before


def test_rescoring_uses_the_stored_answers_and_makes_a_new_run(engine, kb, kb_name, tmp_path):
    dataset = _dataset(tmp_path, kb_name, kb)
    near = "The machine is descaled every week on Friday"  # 7 tokens without "the", 3 shared: f1 = 0.6
    first = answers.evaluate_answers(engine, kb_name, dataset, _answers(tmp_path / "a.jsonl", kb, coffee=near)).run
    coffee = next(c for c in answers.get_answer_run(engine, first.run_id).cases if c.case_id == "coffee")
    assert coffee.answer_metrics.f1 == pytest.approx(0.6) and coffee.answer_metrics.answer_score == -1
    lenient = AnswerScoring(f1_correct_threshold=0.55)
    again = answers.rescore_answer_run(engine, first.run_id, lenient)
    assert again.run.run_id != first.run_id and again.run.answers_sha256 == first.answers_sha256
    kept = lenient.model_copy(update={"convention": "auto"})  # the first run's convention is kept
    assert again.run.scoring_version == scoring_version(kept) != first.scoring_version
    assert again.run.scoring == kept and again.run.rescored_from == first.run_id
    recoffee = next(c for c in again.cases if c.case_id == "coffee")
    assert recoffee.answer == near and recoffee.answer_metrics.answer_score == 1
    assert [c.chunk_id for c in recoffee.citations] == [kb["onboarding.md"]]
    assert answers.get_answer_run(engine, again.run.run_id).cases == again.cases


def test_comparing_two_runs_pairs_the_common_cases(engine, kb, kb_name, tmp_path):
    dataset = _dataset(tmp_path, kb_name, kb)
    a = answers.evaluate_answers(engine, kb_name, dataset, _answers(tmp_path / "a.jsonl", kb, coffee="no idea")).run
    b = answers.evaluate_answers(engine, kb_name, dataset, _answers(tmp_path / "b.jsonl", kb)).run
    comparison = compare_answer_runs(engine, a.run_id, b.run_id)
    assert comparison.common_cases == 4
    em = next(m for m in comparison.metrics if m.metric == "exact_match")
    assert (em.n, em.mean_a, em.mean_b) == (2, 0.0, 0.5)  # backup is not exact in either; the others undefined
    assert em.delta == 0.5 and 0 < em.p_value <= 1 and em.ci_low <= em.delta <= em.ci_high
    assert comparison.verdict_changes == {"retrieval_miss->citation_miss": 1}
    assert comparison == compare_answer_runs(engine, a.run_id, b.run_id), "fixed seed: repeatable"


def test_prune_keeps_the_newest_answer_runs_of_each_answerer(engine, kb, kb_name, tmp_path, capsys):
    dataset = _dataset(tmp_path, kb_name, kb)
    file = _answers(tmp_path / "a.jsonl", kb)
    runs = [answers.evaluate_answers(engine, kb_name, dataset, file, answerer="one").run.run_id for _ in range(3)]
    other = answers.evaluate_answers(engine, kb_name, dataset, file, answerer="two").run.run_id
    name = f"ans-{kb_name}"
    dry = retention.prune_runs(engine, keep_last=1, dataset=name, dry_run=True)
    assert [r.run_id for r in dry.answer_runs] == runs[:2] and dry.answer_runs[0].cases == 4
    assert answers.list_answer_runs(engine, dataset=name).total == 4
    assert main(["runs", "prune", "--keep-last", "1", "--dataset", name, "--dry-run"]) == 0
    assert "would remove 2 answer run(s) (8 case results)" in capsys.readouterr().out
    zero = retention.prune_runs(engine, keep_last=0, dataset=name)  # never the newest of an answerer
    assert sorted(r.run_id for r in zero.answer_runs) == sorted(runs[:2]) and zero.bytes_freed > 0
    left = {r.run_id for r in answers.list_answer_runs(engine, dataset=name).runs}
    assert left == {runs[2], other}
    with pytest.raises(AnswerRunNotFoundError):
        answers.get_answer_run(engine, runs[0])


def test_service_errors_are_of_the_project_kinds(engine, kb, kb_name, tmp_path):
    with pytest.raises(NotFoundError, match="no answer run id starts with"):
        answers.get_answer_run(engine, "0000abcd")
    with pytest.raises(NotFoundError, match="is not an answer run id"):
        answers.rescore_answer_run(engine, "zz", AnswerScoring())
    run = answers.evaluate_answers(engine, kb_name, _dataset(tmp_path, kb_name, kb),
                                   _answers(tmp_path / "a.jsonl", kb)).run
    with pytest.raises(answers.AnswersRequestError, match="verdict must be one of correct, retrieval_miss"):
        answers.get_answer_run(engine, run.run_id, verdict="great")
    with pytest.raises(answers.AnswersRequestError, match="sort must be an answer metric"):
        answers.get_answer_run(engine, run.run_id, sort="rank")
    with pytest.raises(NotFoundError, match="no dataset 'never-stored'"):
        answers.evaluate_answers(engine, kb_name, "never-stored", _answers(tmp_path / "b.jsonl", kb))
    assert answers.get_answer_run(engine, run.run_id, wrong_but_confident=True).cases == []
    with pytest.raises(NotFoundOrInvalidError, match="knowledge base") as info:
        answers.evaluate_answers(engine, f"{kb_name}-missing", "x", b"")
    assert info.value.http_status == 404
    with pytest.raises(answers.AnswersRequestError, match="limit must be 1 to 10000"):
        answers.list_answer_runs(engine, limit=0)
