"""Unanswerable cases in a retrieval run (docs/design.md §12.1), on the real database: searched and their pools
stored, left out of the averages, the stats, the paired comparison and tuning, reported with ``answerable``
false and no metrics; a dataset of only unanswerable cases is refused before anything is written."""

from __future__ import annotations

import jsonschema
import pytest

from rag_pipeline.analysis.comparison import select_runs
from rag_pipeline.contracts.reports import Report, json_schema
from rag_pipeline.evaluation.datasets.load import DatasetError, load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.evaluation.pools import load_pools
from rag_pipeline.evaluation.runs.case_queries import UNANSWERABLE_REASON
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline.service.history import compare_runs
from rag_pipeline_tests.eval_helpers import build_report, ingest_tiny_kb, table_counts, tiny_cases, write_dataset

KB = "eval-unanswerable"
UNANSWERABLE = ("ceo-phone", "mars-office")


def _unanswerable(chunks: dict[str, str]) -> list[dict]:
    return [{"case_id": "ceo-phone", "question": "What is the CEO's private phone number?", "k": 3,
             "relevant_chunk_ids": [], "answerable": False, "reference_answers": ["信息不足"]},
            {"case_id": "mars-office", "question": "火星办公室的咖啡机多久除垢一次？", "k": 2,
             "relevant_chunk_ids": {chunks["coffee.md"]: 0}, "answerable": False}]


@pytest.fixture(scope="module")
def world(engine, tmp_path_factory):
    folder = tmp_path_factory.mktemp("unanswerable")
    chunks = ingest_tiny_kb(engine, KB, folder / "docs")
    cases = tiny_cases(chunks)
    mixed = cases[:2] + _unanswerable(chunks)[:1] + cases[2:] + _unanswerable(chunks)[1:]
    with_them = load_dataset(write_dataset(folder / "x.json", KB, mixed, name="with-unanswerable"))
    without = load_dataset(write_dataset(folder / "y.json", KB, cases, name="answerable-only"))
    runs = {(name, version): evaluate_dataset(engine, data, get_strategy(version), batch_size=2)
            for name, data in (("with", with_them), ("without", without)) for version in ("hybrid-v1", "keyword-v1")}
    return with_them, runs


def test_averages_and_stats_are_those_of_the_answerable_cases(world):
    dataset, runs = world
    for version in ("hybrid-v1", "keyword-v1"):
        mixed, plain = runs[("with", version)], runs[("without", version)]
        assert mixed.case_count == len(dataset.cases) == plain.case_count + 2
        assert mixed.averages == pytest.approx(plain.averages, abs=1e-12), "unanswerable cases add nothing"
        assert mixed.summary.unanswerable_cases == 2 and plain.summary.unanswerable_cases == 0
        for key in ("cases_with_hit", "cases_without_candidates", "relevant_in_pool", "relevant_total"):
            assert getattr(mixed.summary, key) == getattr(plain.summary, key), key


def test_report_marks_unanswerable_cases_with_their_pool_and_no_metrics(engine, world):
    dataset, runs = world
    with engine.connect() as conn:
        report = build_report(conn, runs[("with", "hybrid-v1")].run_id, candidates="all")
    jsonschema.validate(report, json_schema(Report), format_checker=jsonschema.FormatChecker())
    assert report["summary"]["counts"]["unanswerable_cases"] == 2
    assert [c["case_id"] for c in report["cases"]] == [c.case_id for c in dataset.cases], "every case, in order"
    for case in report["cases"]:
        if case["case_id"] in UNANSWERABLE:
            assert (case["answerable"], case["metrics"], case["metrics_skipped"]) == (False, None, UNANSWERABLE_REASON)
            assert case["relevant_chunk_ids"] == [] and case["first_relevant_rank"] is None
            assert case["candidates"] and case["retrieved_chunk_ids"], "searched, its pool stored"
            assert not any(c["is_relevant"] for c in case["candidates"])
        else:
            assert case["answerable"] is True and case["metrics_skipped"] is None
            assert set(case["metrics"]) >= {"ndcg_at_k", "recall_at_k"}
    graded_zero = next(c for c in report["cases"] if c["case_id"] == "mars-office")
    assert set(graded_zero["relevance_grades"].values()) == {0}, "judged-0 chunks kept"


def test_comparison_and_tuning_use_answerable_cases_only(engine, world):
    dataset, runs = world
    answerable = {c.case_id for c in dataset.cases if c.answerable}
    assert len(answerable) == len(dataset.cases) - 2
    pair = compare_runs(engine, runs[("with", "hybrid-v1")].run_id, runs[("with", "keyword-v1")].run_id,
                        n_resamples=200)
    assert {c.case_id for c in pair.cases} == answerable
    assert all(p.n == len(answerable) for p in pair.comparison.paired)
    assert not any("share" in n for n in pair.notes), "both runs pair every scored case"
    with engine.connect() as conn:
        selection = select_runs(conn, "with-unanswerable", KB)
        pools = load_pools(conn, runs[("with", "hybrid-v1")].run_id)
    assert all(set(r.per_case) == answerable for r in selection.runs) and len(selection.runs) == 2
    assert set(pools.case_ids) == answerable


def test_a_dataset_of_only_unanswerable_cases_is_refused_before_anything_is_written(engine, world, tmp_path):
    path = write_dataset(tmp_path / "z.json", KB, _unanswerable({"coffee.md": "x"})[:1], name="none-ok")
    before = table_counts(engine)
    with pytest.raises(DatasetError, match="every case is unanswerable") as info:
        evaluate_dataset(engine, load_dataset(path), get_strategy("hybrid-v1"))
    assert str(path) in str(info.value) and "field 'cases'" in str(info.value)
    assert table_counts(engine) == before
