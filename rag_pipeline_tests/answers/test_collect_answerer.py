"""``answers collect --answerer extractive-v1``: the shipped baseline writes the same answers file as an endpoint,
over the ingested demo knowledge base, and a second run resumes without answering again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rag_pipeline.contracts.answers import AnswerRecord
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline_tests.answers.collect_helpers import read_lines, run_cli

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "datasets" / "demo.json"


@pytest.mark.slow  # ingests the demo knowledge base (real embeddings) and retrieves every demo case
def test_the_baseline_answerer_collects_the_demo_into_an_answers_file(demo_kb, tmp_path, capsys) -> None:
    out = tmp_path / "answers.jsonl"
    assert run_cli(["--dataset", str(DEMO), "--answerer", "extractive-v1", "--output", str(out), "--quiet"]) == 0
    result = json.loads(capsys.readouterr().out)
    lines = read_lines(out)
    case_ids = [c.case_id for c in load_dataset(DEMO).cases]
    assert sorted(line["case_id"] for line in lines) == sorted(case_ids)
    assert result["status"] == "succeeded" and result["answered"] == len(case_ids) == len(lines)
    assert {line["answerer"] for line in lines} == {result["answerer"]} and result["answerer"].startswith(
        "extractive-v1@")
    for line in lines:
        AnswerRecord.model_validate_json(json.dumps(line))
    assert run_cli(["--dataset", str(DEMO), "--answerer", "extractive-v1", "--output", str(out), "--quiet"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["skipped_existing"], again["answered"]) == (len(case_ids), 0) and read_lines(out) == lines
    assert run_cli(["--dataset", str(DEMO), "--answerer", "no-such-answerer", "--output",
                    str(tmp_path / "b.jsonl"), "--quiet"]) == 2
    assert "unknown answerer 'no-such-answerer'" in capsys.readouterr().err
    assert not (tmp_path / "b.jsonl").exists()
