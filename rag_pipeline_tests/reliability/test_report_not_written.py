"""A run that is stored but whose report cannot be written (a full disk): ``evaluate --output`` and ``answers
evaluate --output`` say ``stored as run <id>; report not written: <PATH>: <reason>`` and exit 73; the report file
keeps its previous content, no temporary file stays beside it, and the run is stored. ``show --output`` on a full
disk: ``<PATH>: <reason>``, exit 73, the file unchanged.

The disk is "full" for the command only: it runs in a child process with a file size limit (``RLIMIT_FSIZE``,
``SIGXFSZ`` ignored), so any write past the limit fails with ``File too large`` (EFBIG), as ENOSPC would, without
root or a special filesystem. The database server is not that process's child: it is not limited."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from rag_pipeline.contracts.errors import EXIT_OUTPUT_NOT_WRITTEN
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, tiny_cases, write_dataset

RAG = Path(sys.executable).with_name("rag-pipeline")
LIMIT = 1500  # bytes: more than the previous report, less than a new one
PREVIOUS = '{"previous": "report"}\n'


def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # kept across exec: writes fail with EFBIG instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, resource.RLIM_INFINITY))


def _run_on_a_full_disk(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(RAG), *argv], cwd=cwd, capture_output=True, text=True, timeout=300, check=False,
                          preexec_fn=_limit_file_size, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def kb(engine, kb_name, tmp_path) -> tuple[str, dict[str, str]]:
    return kb_name, ingest_tiny_kb(engine, kb_name, tmp_path / "docs")


def test_evaluate_output_on_a_full_disk_says_the_run_is_stored_and_exits_73(engine, kb, tmp_path):
    kb_name, chunks = kb
    dataset = write_dataset(tmp_path / "ds.json", kb_name, tiny_cases(chunks), name=f"full-{kb_name}")
    out = tmp_path / "out"
    out.mkdir()
    report = out / "report.json"
    report.write_text(PREVIOUS, encoding="utf-8")
    done = _run_on_a_full_disk(["evaluate", "--dataset", str(dataset), "--strategy", "keyword-v1", "--quiet",
                                "--include-text", "--output", str(report)], tmp_path)
    with engine.connect() as conn:
        runs = run_records.list_runs(conn, dataset=f"full-{kb_name}")
    assert len(runs) == 1 and runs[0].status == "succeeded" and runs[0].is_current, "the run is stored"
    assert done.returncode == EXIT_OUTPUT_NOT_WRITTEN, done.stderr
    assert done.stderr == (f"rag-pipeline: error: stored as run {runs[0].id}; report not written: {report}: "
                           "File too large\n")
    assert report.read_text(encoding="utf-8") == PREVIOUS
    assert _names(out) == ["report.json"], "no temporary file left"
    assert "keyword-v1" in done.stdout, "the summary table is still printed"
    shown = _run_on_a_full_disk(["show", str(runs[0].id), "--include-text", "--output", str(report)], tmp_path)
    assert (shown.returncode, shown.stderr) == (EXIT_OUTPUT_NOT_WRITTEN,
                                                f"rag-pipeline: error: {report}: File too large\n")
    assert report.read_text(encoding="utf-8") == PREVIOUS and _names(out) == ["report.json"]


def test_answers_evaluate_output_on_a_full_disk_says_the_run_is_stored_and_exits_73(engine, kb, tmp_path):
    kb_name, chunks = kb
    cases = [{"case_id": c["case_id"], "question": c["question"], "k": c["k"],
              "relevant_chunk_ids": c["relevant_chunk_ids"], "reference_answers": ["x " * 200]}
             for c in tiny_cases(chunks)]
    dataset = write_dataset(tmp_path / "ds.json", kb_name, cases, name=f"afull-{kb_name}")
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"case_id": c["case_id"], "answer": "an answer " * 30,
                                           "cited_chunk_ids": c["relevant_chunk_ids"]}) + "\n" for c in cases),
                       encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    report = out / "report.json"
    report.write_text(PREVIOUS, encoding="utf-8")
    done = _run_on_a_full_disk(["answers", "evaluate", "--knowledge-base", kb_name, "--dataset", str(dataset),
                                "--answers", str(answers), "--quiet", "--output", str(report)], tmp_path)
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT r.id FROM answer_runs r JOIN retrieval_evaluation_datasets d "
                                      "ON d.id = r.dataset_id WHERE d.name = :name"),
                              {"name": f"afull-{kb_name}"}).scalars().all()
    assert len(stored) == 1, "the run is stored"
    assert done.returncode == EXIT_OUTPUT_NOT_WRITTEN, done.stderr
    assert done.stderr == (f"rag-pipeline: error: stored as run {stored[0]}; report not written: {report}: "
                           "File too large\n")
    assert report.read_text(encoding="utf-8") == PREVIOUS
    assert _names(out) == ["report.json"], "no temporary file left"
    assert "n_scored" in done.stdout or "scored" in done.stdout, "the summary is still printed"


def test_fix_labels_output_on_a_full_disk_keeps_the_previous_file(kb, tmp_path):
    """Not a run, but the same writer: ``fix-labels --output`` over an existing file on a full disk names the file
    (exit 73) and leaves its previous content, not the first kilobyte of the new one."""
    kb_name, chunks = kb
    cases = [{**c, "question": c["question"] + " " + "padding " * 60} for c in tiny_cases(chunks)]
    dataset = write_dataset(tmp_path / "ds.json", kb_name, cases, name=f"fix-{kb_name}")
    out = tmp_path / "out"
    out.mkdir()
    fixed = out / "fixed.json"
    fixed.write_text(PREVIOUS, encoding="utf-8")
    done = _run_on_a_full_disk(["fix-labels", "--dataset", str(dataset), "--knowledge-base", kb_name,
                                "--output", str(fixed)], tmp_path)
    assert (done.returncode, done.stderr) == (EXIT_OUTPUT_NOT_WRITTEN,
                                              f"rag-pipeline: error: {fixed}: File too large\n")
    assert fixed.read_text(encoding="utf-8") == PREVIOUS
    assert _names(out) == ["fixed.json"]
