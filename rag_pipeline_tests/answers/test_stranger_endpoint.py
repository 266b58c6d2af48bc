"""A stranger's RAG endpoint from end to end: a real HTTP server on 127.0.0.1 answering the demo dataset from the
demo knowledge base (its answers are extractive-v1's, so they cite real chunks), with injected 503s and one slow
reply; ``answers collect --concurrency 4`` in a subprocess is killed with SIGKILL halfway, resumed without asking
an answered case again, and the file is scored. The figures equal those of the same answers written directly:
the HTTP round trip, the kill and the resume lose nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag_pipeline.answers.collection.answerers import get_answerer
from rag_pipeline.contracts.answers import ANSWER_METRIC_NAMES
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.service.answers import evaluate_answers
from rag_pipeline_tests.answers.collect_helpers import collect_killed_after, run_cli
from rag_pipeline_tests.answers.rag_endpoint_server import RagEndpoint

ROOT = Path(__file__).resolve().parents[2]
DATASET = ROOT / "datasets" / "demo.json"


@pytest.mark.slow  # a subprocess collecting the 45 demo cases at 0.1 s each, killed halfway and resumed
def test_a_strangers_endpoint_is_collected_killed_resumed_and_scored(engine, demo_kb, tmp_path) -> None:
    cases = load_dataset(DATASET).cases
    direct = list(get_answerer("extractive-v1", engine=engine, knowledge_base=demo_kb).answer_cases(cases))
    replies = {r.case_id: {"answer": r.answer, "citations": r.cited_chunk_ids, "contexts": r.retrieved_chunk_ids}
               for r in direct}
    direct_file = tmp_path / "direct.jsonl"
    direct_file.write_text("".join(r.model_copy(update={"answerer": None, "refused": None}).model_dump_json(
        exclude_none=True) + "\n" for r in direct), encoding="utf-8")
    ids = [c.case_id for c in cases]
    plan = {ids[3]: ["503", "ok"], ids[20]: ["503", "503", "ok"], ids[33]: ["503", "ok"], ids[8]: ["slow:1.5"]}
    out = tmp_path / "answers.jsonl"
    argv = ["--dataset", str(DATASET), "--output", str(out), "--concurrency", "4", "--quiet"]
    with RagEndpoint(plan, delay=0.1, replies=replies) as server:
        answered = collect_killed_after([*argv, "--endpoint", server.url], out, 15)
        asked_before = dict(server.requests)
        assert 15 <= len(answered) < len(ids), "killed halfway"
        assert run_cli([*argv, "--endpoint", server.url]) == 0
    for case_id in answered:
        assert server.requests[case_id] == asked_before[case_id], f"{case_id} was asked again after the resume"
    assert server.requests[ids[20]] >= 3 or ids[20] in answered, "the 503s were retried"

    collected = evaluate_answers(engine, demo_kb, DATASET, out, answerer="stranger-rag")
    expected = evaluate_answers(engine, demo_kb, DATASET, direct_file, answerer="stranger-rag", store=False)
    summary = collected.summary
    assert (summary.cases, summary.answered, summary.missing, summary.coverage) == (len(ids), len(ids), 0, 1.0)
    assert collected.run is not None and collected.run.answerer == "stranger-rag"
    for name in ANSWER_METRIC_NAMES:
        assert summary.metrics[name].mean == pytest.approx(expected.summary.metrics[name].mean), name
        assert summary.metrics[name].n_scored == expected.summary.metrics[name].n_scored, name
    assert summary.verdicts == expected.summary.verdicts
    assert summary.refusal_recall.mean == expected.summary.refusal_recall.mean
    assert sum(summary.verdicts.values()) == len(ids)
    assert summary.metrics["citation_precision"].mean > 0.5, "the endpoint's citations are the demo's real chunks"
