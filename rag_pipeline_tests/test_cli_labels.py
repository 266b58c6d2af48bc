"""Labels are checked before every run (docs/design.md §8), and exit codes mean one thing each
(docs/failure-behaviour.md, "Exit codes")."""

from __future__ import annotations

import json

import pytest

from rag_pipeline.cli import main
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, table_counts, tiny_cases, write_dataset

KB = "labels-gate"


@pytest.fixture(scope="module")
def world(engine, tmp_path_factory):
    """(chunk ids by document, document ids by name, a folder for dataset files)."""
    folder = tmp_path_factory.mktemp("labels_gate")
    chunks = ingest_tiny_kb(engine, KB, folder / "docs")
    import sqlalchemy as sa

    with engine.connect() as conn:
        docs = dict(conn.execute(sa.text(
            "SELECT d.original_name, d.id::text FROM documents d "
            "JOIN knowledge_bases kb ON kb.id = d.knowledge_base_id "
            "WHERE kb.name = :n"), {"n": KB}).all())
    return chunks, docs, folder


def _evaluate(path, *extra) -> int:
    return main(["evaluate", "--dataset", str(path), "--strategy", "keyword-v1", "--quiet", *extra])


def test_some_invalid_labels_run_and_say_so_first(engine, world, capsys):
    chunks, docs, folder = world
    cases = tiny_cases(chunks)
    cases[1]["relevant_chunk_ids"] = [docs["monorepo.md"]]  # a document id, not a chunk id
    path = write_dataset(folder / "one-doc-id.json", KB, cases)
    assert _evaluate(path) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("warning: 1 of 6 labels are invalid (1 is_document_id)"), out[0]
    assert "labels are document ids, not chunk ids" in out[0] and "case monorepo-001" in out[0]
    runs = json.loads(_runs_json(capsys, "one-doc-id"))
    integrity = runs[0]["counts"]["label_integrity"]
    assert integrity["counts"] == {"ok": 5, "is_document_id": 1}
    [example] = integrity["examples"]
    assert (example["case_id"], example["chunk_id"], example["status"]) == \
        ("monorepo-001", docs["monorepo.md"], "is_document_id")
    assert chunks["monorepo.md"] in example["detail"], "the fix: the document's current chunks"


def _runs_json(capsys, dataset: str) -> str:
    assert main(["runs", "--dataset", dataset, "--format", "json"]) == 0
    return capsys.readouterr().out


def test_a_dataset_with_no_valid_label_is_refused_with_exit_2_and_nothing_written(engine, world, capsys):
    chunks, docs, folder = world
    cases = tiny_cases(chunks)
    for case in cases:
        case["relevant_chunk_ids"] = [docs["coffee.md"]]
    path = write_dataset(folder / "all-doc-ids.json", KB, cases)
    before = table_counts(engine)
    assert _evaluate(path) == 2
    err = capsys.readouterr().err
    assert err.startswith("rag-pipeline: error: dataset 'all-doc-ids': no label is a searchable chunk")
    assert "5 of 5 labels are document ids, not chunk ids" in err and "nothing was run" in err
    after = table_counts(engine)
    assert {t: after[t] - before[t] for t in after if t != "retrieval_evaluation_datasets"} == \
        {t: 0 for t in after if t != "retrieval_evaluation_datasets"}


def test_strict_refuses_any_invalid_label_with_exit_1(engine, world, capsys):
    chunks, docs, folder = world
    cases = tiny_cases(chunks)
    cases[0]["relevant_chunk_ids"] = [chunks["backup.md"], docs["backup.md"]]
    path = write_dataset(folder / "strict.json", KB, cases)
    before = table_counts(engine)
    assert _evaluate(path, "--strict") == 1
    err = capsys.readouterr().err
    assert err.startswith("rag-pipeline: error: --strict: 1 of 6 labels are invalid") and "nothing was run" in err
    assert table_counts(engine)["retrieval_evaluation_runs"] == before["retrieval_evaluation_runs"]
    assert _evaluate(write_dataset(folder / "strict-ok.json", KB, tiny_cases(chunks)), "--strict") == 0


# `runs` opens the database before it calls the service: with the server up first (and the test marked `db`),
# stderr holds the error line only, whichever test ran before
@pytest.mark.usefixtures("engine")
def test_a_bug_exits_70_and_a_user_error_2(monkeypatch, capsys, tmp_path):
    from rag_pipeline.service import evaluations

    def broken(*_args, **_kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(evaluations, "run_page", broken)
    assert main(["runs"]) == 70
    err = capsys.readouterr().err
    assert err.startswith("rag-pipeline: error: unexpected ZeroDivisionError: division by zero") and "RAG_DEBUG" in err
    assert main(["evaluate", "--dataset", str(tmp_path / "missing.json")]) == 2


def test_every_command_documents_the_exit_codes(capsys):
    for command in ("evaluate", "compare", "check-dataset", "tune", "runs"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "70 internal error" in capsys.readouterr().out.replace("\n", " "), command
