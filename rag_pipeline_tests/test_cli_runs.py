"""``rag-pipeline show`` with run-id prefixes, the ``runs`` table (dates, legend), plain ``compare`` text and
the end-of-``make run`` summary."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from rag_pipeline.analysis.comparison import StrategyRun, compare, regression_gate
from rag_pipeline.analysis.comparison_report import render_text
from rag_pipeline.analysis.text_table import cell_width
from rag_pipeline.cli import main
from rag_pipeline.cli.runs_table import comparison_table
from rag_pipeline.contracts.label_check import LabelReport
from rag_pipeline.knowledge_base import chunking
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.sources import SourceDocument

STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d")
FINISHED = dt.datetime(2024, 3, 6, 1, 45, 10, tzinfo=dt.timezone(dt.timedelta(hours=2)))  # 23:45 UTC


@pytest.fixture(scope="module")
def world(engine):
    """A KB, a dataset and three runs: two whose ids share their first 10 hex digits, one running."""
    kb = f"runs-{uuid.uuid4().hex[:8]}"
    ingest_documents(engine, [SourceDocument("a.md", None, "Some text about runs.")], kb, chunk_size=None,
                     models=())
    name = f"runs-{uuid.uuid4().hex[:6]}"
    shared = uuid.uuid4().hex[:10]
    twin_a = uuid.UUID(shared + "a" + uuid.uuid4().hex[:21])
    twin_b = uuid.UUID(shared + "b" + uuid.uuid4().hex[:21])
    running = uuid.uuid4()
    with engine.begin() as conn:
        ds = conn.execute(sa.text(
            "INSERT INTO retrieval_evaluation_datasets (id, name, knowledge_base_name, content_hash, case_count, "
            "cases) VALUES (gen_random_uuid(), :n, :kb, 'h', 0, '[]') RETURNING id"),
            {"n": name, "kb": kb}).scalar_one()
        for run_id, version, status, current in ((twin_a, "hybrid-v1", "succeeded", True),
                                                 (twin_b, "bm25-v1", "succeeded", False),
                                                 (running, "keyword-v1", "running", False)):
            conn.execute(sa.text(
                "INSERT INTO retrieval_evaluation_runs (id, dataset_id, knowledge_base_id, strategy_version, "
                "params_hash, strategy_params, status, is_current, case_count, candidate_count, started_at, "
                "finished_at) VALUES (:id, :ds, :kb, :v, 'x', '{}', :st, :cur, 0, 0, "
                "TIMESTAMPTZ '2024-03-05 22:30:00+00', :fin)"),
                {"id": run_id, "ds": ds, "kb": chunking.knowledge_base_id(kb), "v": version, "st": status,
                 "cur": current, "fin": None if status == "running" else FINISHED})
    return {"dataset": name, "a": str(twin_a), "b": str(twin_b), "running": str(running), "shared": shared}


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rag-pipeline: error: "), err
    return err[0]


def test_show_accepts_a_unique_prefix_in_any_case_and_form(world, capsys):
    a = world["a"]
    for prefix in (a[:8 + 1 + 3], a[:12].upper(), a.replace("-", "")[:11], a.upper()):
        assert main(["show", prefix]) == 0, prefix
        report = json.loads(capsys.readouterr().out)
        assert report["summary"]["run_id"] == a and report["summary"]["strategy_version"] == "hybrid-v1"
    assert main(["show", world["running"][:8]]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["run_id"] == world["running"]


def test_an_ambiguous_prefix_lists_the_matches_and_writes_nothing(world, capsys, tmp_path: Path):
    out = tmp_path / "report.json"
    assert main(["show", world["shared"][:8], "--output", str(out)]) == 2
    line = _err(capsys)
    assert "matches several runs" in line and world["a"] in line and world["b"] in line
    assert "hybrid-v1" in line and "give more characters" in line
    assert not out.exists(), "an ambiguous prefix fails before --output is opened"


def test_unknown_too_short_and_non_hex_prefixes_are_one_line_errors(world, capsys):
    fresh = uuid.uuid4().hex[:12]
    assert main(["show", fresh]) == 2
    assert f"no evaluation run id starts with '{fresh}'" in _err(capsys)
    assert main(["show", world["a"][:3]]) == 2
    assert "too short" in _err(capsys)
    for bad in ("fda2-5a97", "zzzz1234", "'; DROP TABLE x; --"):
        assert main(["show", bad]) == 2, bad
        assert "is not a run id" in _err(capsys)
    assert main(["show", str(uuid.uuid4())]) == 2
    assert "no evaluation run" in _err(capsys)


def test_runs_table_has_dates_short_ids_and_a_legend(world, capsys):
    assert main(["runs", "--dataset", world["dataset"]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "started (UTC)" in lines[0] and "finished" in lines[0] and lines[0].rstrip().endswith("run")
    rows = {line.split()[0]: line for line in lines[2:5]}
    assert set(rows) == {"hybrid-v1", "bm25-v1", "keyword-v1"}
    assert "succeeded*" in rows["hybrid-v1"] and "succeeded*" not in rows["bm25-v1"]
    assert "2024-03-05 22:30  2024-03-05 23:45" in rows["hybrid-v1"]
    # the twins share their first 10 hex digits: the table prints enough to tell them apart
    assert rows["hybrid-v1"].rstrip().endswith(world["a"][:12]) and world["a"] not in rows["hybrid-v1"]
    assert rows["keyword-v1"].split()[-1] == world["running"][:12]
    assert STAMP.search(rows["keyword-v1"]) and re.search(r"22:30\s+-\s", rows["keyword-v1"])
    legend = "\n".join(lines[5:])
    assert "* = the current run of its dataset × knowledge base × strategy" in legend
    for status in ("running", "succeeded", "failed", "abandoned"):
        assert status in legend
    # the short id a row prints is what `show` takes
    for version, run in (("bm25-v1", "b"), ("keyword-v1", "running")):
        assert main(["show", rows[version].split()[-1]]) == 0
        assert json.loads(capsys.readouterr().out)["summary"]["run_id"] == world[run]


def test_table_without_timestamps_and_without_legend():
    summary = {"strategy_version": "v", "dataset": {"name": "d"}, "status": "failed", "is_current": False,
               "case_count": 0, "run_id": "0123456789", "precision_at_k": None, "recall_at_k": None,
               "reciprocal_rank": None, "ndcg_at_k": None}
    table = comparison_table([summary], legend=False)
    assert table.splitlines()[-1].split()[-3:] == ["-", "-", "01234567"] and "current run" not in table


def test_table_aligns_wide_characters_by_display_width():
    """Intentional change: the runs table is drawn by the one text-table renderer (analysis.text_table), which
    counts a CJK character as two terminal columns, like the compare tables always did; before, the runs table
    padded by characters, so a Chinese dataset name pushed its row's later columns out of line."""
    rows = [{"strategy_version": "v", "dataset": {"name": name}, "status": "succeeded", "is_current": True,
             "case_count": 1, "run_id": f"{i}123456789", "precision_at_k": 0.5, "recall_at_k": 0.5,
             "reciprocal_rank": 0.5, "ndcg_at_k": 0.5} for i, name in enumerate(("中文数据", "latin"))]
    header, _, chinese, latin = comparison_table(rows, legend=False).splitlines()
    status_column = header.index("status")
    assert cell_width(chinese.split("succeeded")[0]) == cell_width(latin.split("succeeded")[0]) == status_column


# --- plain text comparison and the demo summary ------------------------------------------------------------

def _runs() -> list[StrategyRun]:
    rng = np.random.default_rng(0)
    base = rng.uniform(0.6, 1.0, 12)
    runs = [StrategyRun("hybrid-v1", "aaaabbbb-0000-0000-0000-000000000000",
                        {f"c{i}": {m: float(v) for m in ("precision_at_k", "recall_at_k", "reciprocal_rank",
                                                            "ndcg_at_k")} for i, v in enumerate(base)}),
            StrategyRun("keyword-v1", "ccccdddd-0000-0000-0000-000000000000",
                        {f"c{i}": {m: float(v) * 0.3 for m in ("precision_at_k", "recall_at_k",
                                                                 "reciprocal_rank", "ndcg_at_k")}
                         for i, v in enumerate(base)})]
    return runs


def _comparison():
    comp = compare(_runs(), dataset="demo", n_resamples=500)
    return comp, comp.gate


def test_compare_text_is_plain_and_the_markdown_stays_for_dagster():
    comp, gate = _comparison()
    assert not gate.passed
    text = render_text(comp)
    assert "**" not in text and "| " not in text and "`" not in text and "<br>" not in text
    assert "Regression gate FAILED: keyword-v1 is worse" in text
    assert "hybrid-v1 (baseline)" in text and "Paired significance" in text and "Cases that moved most" in text


def test_demo_summary_is_plain_with_real_paths_and_next_commands(tmp_path: Path):
    from rag_pipeline.defs.demo import demo_summary

    comp, gate = _comparison()
    paths = [tmp_path / "demo-hybrid-v1.json", tmp_path / "demo-keyword-v1.json"]
    text = demo_summary(comp, paths)
    assert "**" not in text and "<strategy>" not in text and "| " not in text
    assert "Regression gate FAILED: keyword-v1 is worse" in text
    assert "a failed gate is expected here (keyword-v1)" in text and "`make run` still succeeds" in text
    assert f"2 JSON reports (one per strategy) in {tmp_path}/:" in text
    assert "  demo-hybrid-v1.json" in text and "  demo-keyword-v1.json" in text
    for command in ("make dev", ".venv/bin/rag-pipeline runs --dataset demo", ".venv/bin/rag-pipeline show aaaabbbb",
                    ".venv/bin/rag-pipeline compare --dataset demo", "source .venv/bin/activate"):
        assert command in text, command
    assert "Paired significance" not in text, "the summary keeps to the table; `compare` has the details"

    comp.gate = regression_gate(comp.paired, margin=1.0)
    text = demo_summary(comp, [Path("/r/a.json"), Path("/s/b.json")])
    assert "Regression gate passed" in text and "none is significantly worse on the 12 answerable cases" in text
    assert "  /r/a.json" in text and "  /s/b.json" in text


def test_several_failing_strategies_are_listed_one_per_line():
    base, weak = _runs()
    also = StrategyRun("vector-v1", "eeeeffff-0000-0000-0000-000000000000",
                       {c: {m: v * 0.5 for m, v in values.items()} for c, values in weak.per_case.items()})
    text = render_text(compare([base, weak, also], dataset="demo", n_resamples=500))
    assert "Regression gate FAILED:\n  - keyword-v1 is worse" in text and "\n  - vector-v1 is worse" in text


def test_every_count_says_what_it_counts():
    """A run's cases are all of the dataset's; the comparison's are the answerable ones the means average over."""
    row = {"strategy_version": "v", "dataset": {"name": "d"}, "status": "succeeded", "is_current": True,
           "case_count": 45, "counts": {"unanswerable_cases": 4}, "run_id": "0123456789", "precision_at_k": 0.5,
           "recall_at_k": 0.5, "reciprocal_rank": 0.5, "ndcg_at_k": 0.5}
    table = comparison_table([row])
    assert "45 (41 scored)" in table.splitlines()[2] and "(N scored) = the answerable ones" in table
    assert "45  " in comparison_table([{**row, "counts": {"unanswerable_cases": 0}}], legend=False)
    comp, _ = _comparison()
    text = render_text(comp)
    assert "scored cases" in text.splitlines()[2] and "scored cases: the answerable ones" in text
    report = LabelReport(knowledge_base="kb", rows=[], verdicts={})
    assert report.summary().endswith("(labels: the relevant chunks, grade >= 1)")
