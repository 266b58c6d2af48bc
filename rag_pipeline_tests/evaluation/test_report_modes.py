"""Reports sized for people: ``--candidates default|all|selected|relevant|none``, ``--case``, ``--format jsonl``
(the same entries as the JSON report, one case per line), through the Python API and the CLI."""

from __future__ import annotations

import json

import jsonschema
import pytest

from rag_pipeline.cli import main
from rag_pipeline.cli.output import case_text
from rag_pipeline.contracts.reports import CaseReport, JsonlHeader, Report, json_schema
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.evaluation.runs.reports import CANDIDATE_MODES, CaseNotFoundError
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline_tests.eval_helpers import build_report, ingest_tiny_kb, table_counts, tiny_cases, write_dataset

# the report's JSON Schemas are generated from its contracts (they were a hand-written module)
REPORT_SCHEMA, JSONL_HEADER_SCHEMA, CASE_SCHEMA = (json_schema(m) for m in (Report, JsonlHeader, CaseReport))

KB = "report-modes"


@pytest.fixture(scope="module")
def run_id(engine, tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("report_modes")
    chunks = ingest_tiny_kb(engine, KB, folder / "docs")
    dataset = load_dataset(write_dataset(folder / "d.json", KB, tiny_cases(chunks), name="report-modes"))
    return evaluate_dataset(engine, dataset, get_strategy("hybrid-v1")).run_id


def _ids(case: dict) -> list[tuple[int, str]]:
    return [(c["rank"], c["chunk_id"]) for c in case["candidates"]]


def test_each_mode_lists_exactly_its_candidates(engine, run_id):
    with engine.connect() as conn:
        reports = {mode: build_report(conn, run_id, candidates=mode) for mode in CANDIDATE_MODES}
    full = reports["all"]
    assert sum(len(c["candidates"]) for c in full["cases"]) == full["summary"]["candidate_count"]
    for mode, report in reports.items():
        jsonschema.validate(report, REPORT_SCHEMA)
        assert report["candidates"] == mode
        assert [c["miss_reasons"] for c in report["cases"]] == [c["miss_reasons"] for c in full["cases"]]
    listed_somewhere = 0
    for i, case in enumerate(full["cases"]):
        pool = case["candidates"]
        selected = [(c["rank"], c["chunk_id"]) for c in pool if c["is_selected"]]
        relevant = [(c["rank"], c["chunk_id"]) for c in pool if c["is_relevant"]]
        assert [cid for _, cid in selected] == case["retrieved_chunk_ids"]
        assert _ids(reports["selected"]["cases"][i]) == selected
        assert _ids(reports["relevant"]["cases"][i]) == relevant
        assert _ids(reports["default"]["cases"][i]) == sorted(set(selected) | set(relevant))
        assert reports["none"]["cases"][i]["candidates"] == []
        listed_somewhere += len(pool) > len(reports["default"]["cases"][i]["candidates"])
    assert listed_somewhere, "the default report is smaller than the full pool for some case"


def test_one_case_and_an_unknown_case(engine, run_id, capsys):
    with engine.connect() as conn:
        one = build_report(conn, run_id, case_id="monorepo-001", candidates="all")
        with pytest.raises(CaseNotFoundError, match="has no case 'nope'"):
            build_report(conn, run_id, case_id="nope")
        full = build_report(conn, run_id, candidates="all")
    assert [c["case_id"] for c in one["cases"]] == ["monorepo-001"]
    assert one["cases"][0] == next(c for c in full["cases"] if c["case_id"] == "monorepo-001")
    assert main(["show", run_id, "--case", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no case 'nope'" in err[0]


def test_jsonl_is_the_report_one_case_per_line(engine, run_id, tmp_path, capsys):
    assert main(["show", run_id, "--format", "jsonl"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header, cases = json.loads(lines[0]), [json.loads(line) for line in lines[1:]]
    jsonschema.validate(header, JSONL_HEADER_SCHEMA)
    for case in cases:
        jsonschema.validate(case, CASE_SCHEMA)
    with engine.connect() as conn:
        report = build_report(conn, run_id)
    assert header == {k: v for k, v in report.items() if k != "cases"} and cases == report["cases"]
    out = tmp_path / "one.jsonl"
    assert main(["show", run_id[:8], "--format", "jsonl", "--case", "backup-001", "--candidates", "none",
                 "--output", str(out)]) == 0
    written = out.read_text(encoding="utf-8").splitlines()
    assert len(written) == 2 and json.loads(written[1])["case_id"] == "backup-001"
    assert json.loads(written[1])["candidates"] == []


def test_evaluate_refuses_an_unknown_case_before_running(engine, run_id, tmp_path, capsys):
    before = table_counts(engine)
    path = tmp_path / "report-modes.json"
    chunks_file = write_dataset(path, KB, [{"case_id": "only", "question": "coffee", "k": 1,
                                            "relevant_chunk_ids": ["00000000-0000-0000-0000-000000000000"]}])
    assert main(["evaluate", "--dataset", str(chunks_file), "--case", "other", "--output",
                 str(tmp_path / "r.json"), "--quiet"]) == 2
    assert "--case 'other': dataset" in capsys.readouterr().err
    assert table_counts(engine) == before


def test_show_text_prints_summary_then_each_case_with_selected_chunks_and_misses(engine, run_id, capsys):
    with engine.connect() as conn:
        full = build_report(conn, run_id, candidates="default")
    assert main(["show", run_id[:8], "--format", "text"]) == 0
    out = capsys.readouterr().out
    assert not out.lstrip().startswith("{")
    head, *cases = out.strip().split("\n\n")
    assert run_id in head and "hybrid-v1" in head and "succeeded" in head and "nDCG@k" in head
    assert f"{full['summary']['ndcg_at_k']:.3f}" in head
    assert len(cases) == len(full["cases"])
    for text, case in zip(cases, full["cases"], strict=True):
        assert text.startswith(f"case {case['case_id']} (k={case['k']})")
        for chunk_id in case["retrieved_chunk_ids"]:
            assert chunk_id in text
    # a miss (the tiny run has none): its chunk, reason and the reason in words are printed under "missed:"
    miss = {"case_id": "x", "chunk_id": "c-9", "reason": "below_cutoff", "k": 3,
            "detail": "rank 7 of the pool,\nbelow k=3"}
    case = CaseReport.model_validate(dict(full["cases"][0], miss_reasons=[miss]))
    missed = case_text(case).split("  missed:\n")[1]
    assert "c-9" in missed and "below_cutoff" in missed and "rank 7 of the pool, below k=3" in missed
