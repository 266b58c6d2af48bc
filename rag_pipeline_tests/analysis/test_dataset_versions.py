"""Versions never mix and the current run is the latest *started* one, on real Postgres."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from rag_pipeline.analysis.comparison import ComparisonError, select_runs
from rag_pipeline.analysis.tuning.stored_run import TuneError, find_pool_run
from rag_pipeline.cli import main
from rag_pipeline.contracts.runs import RunCounts
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.evaluation.metrics import METRIC_NAMES
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.evaluation.runs import results as persistence
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline.retrieval.strategy_store import register_strategy
from rag_pipeline.service import analysis
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, tiny_cases, write_dataset

KB = "versions-kb"


@pytest.fixture(scope="module")
def versions(engine, tmp_path_factory):
    """Dataset ``versioned``: v1 evaluated with three strategies, then the file changed (v2) and only two
    strategies re-evaluated. Returns (v1 hash, v2 hash, path)."""
    folder = tmp_path_factory.mktemp("versions")
    chunks = ingest_tiny_kb(engine, KB, folder / "docs")
    path = write_dataset(folder / "versioned.json", KB, tiny_cases(chunks))
    v1 = load_dataset(path)
    for version in ("hybrid-v1", "keyword-v1", "bm25-v1"):
        evaluate_dataset(engine, v1, get_strategy(version))
    path = write_dataset(path, KB, tiny_cases(chunks)[:4])  # one case fewer: a new version
    v2 = load_dataset(path)
    assert v2.content_hash != v1.content_hash
    for version in ("hybrid-v1", "keyword-v1"):
        evaluate_dataset(engine, v2, get_strategy(version))
    return v1.content_hash, v2.content_hash, path


def test_compare_uses_the_latest_version_and_lists_the_stale_strategy(engine, versions):
    v1, v2, _ = versions
    with engine.connect() as conn:
        selection = select_runs(conn, "versioned")
    assert selection.dataset_version == v2 and selection.knowledge_base == KB
    assert [r.version for r in selection.runs] == ["hybrid-v1", "keyword-v1"]
    assert all(r.dataset_version == v2 and len(r.per_case) == 4 for r in selection.runs)
    assert selection.stale == {"bm25-v1": f"stale: no run on version {v2[:12]}"}
    result = analysis.compare(engine, "versioned", n_resamples=200)
    assert [r.strategy for r in result.runs] == ["hybrid-v1", "keyword-v1"]
    assert "bm25-v1: stale: no run on version " + v2[:12] in result.notes
    assert not any("paired on the" in n for n in result.notes), "same cases on both sides"


def test_an_explicit_older_version_compares_only_its_runs(engine, versions, capsys):
    v1, _, _ = versions
    with engine.connect() as conn:
        selection = select_runs(conn, "versioned", dataset_version=v1[:10])
        with pytest.raises(ComparisonError, match="no stored dataset 'versioned' with version 'ffff'"):
            select_runs(conn, "versioned", dataset_version="ffff")
    assert selection.dataset_version == v1 and selection.stale == {}
    assert [r.version for r in selection.runs] == ["bm25-v1", "hybrid-v1", "keyword-v1"]
    assert all(len(r.per_case) == 5 for r in selection.runs)
    assert main(["compare", "--dataset", "versioned", "--dataset-version", v1[:12], "--format", "json",
                 "--resamples", "200"]) in (0, 1)
    out = json.loads(capsys.readouterr().out)
    assert out["dataset_version"] == v1 and {r["dataset_version"] for r in out["runs"]} == {v1}


def test_tuning_reads_pools_of_the_chosen_version_only(engine, versions):
    v1, v2, _ = versions
    with engine.connect() as conn:
        assert find_pool_run(conn, "versioned", "keyword-v1").dataset_version == v2
        assert find_pool_run(conn, "versioned", "bm25-v1", dataset_version=v1).dataset_version == v1
        with pytest.raises(TuneError, match=r"no current succeeded run of strategy 'bm25-v1' on dataset 'versioned' "
                                            rf"\(version {v2[:12]}\).*current runs on this dataset: hybrid-v1, "
                                            "keyword-v1"):
            find_pool_run(conn, "versioned", "bm25-v1")


def _finished_run(engine, dataset, kb_id, version: str, started: str):
    """A run row started at ``started`` (an SQL interval before now), not yet finished."""
    strategy = get_strategy(version)
    with engine.begin() as conn:
        params_hash = register_strategy(conn, strategy)
        dataset_id = persistence.store_dataset(conn, dataset, KB)
    run_id = run_records.create_run(engine, dataset_id=dataset_id, knowledge_base_id=kb_id, strategy=strategy,
                             params_hash=params_hash)
    with engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE retrieval_evaluation_runs SET started_at = now() - interval '{started}' "
                             "WHERE id = :id"), {"id": run_id})
    return run_id


def _finalize(engine, run_id, dataset) -> None:
    with engine.begin() as conn:
        persistence.finalize_run(conn, run_id, dataset_name=dataset.name, knowledge_base_name=KB,
                                 strategy_version="rrf-v1", case_count=0, candidate_count=0,
                                 averages=dict.fromkeys(METRIC_NAMES, 0.0), timings={}, summary=RunCounts())


def test_a_run_that_started_earlier_never_displaces_a_newer_one_by_finishing_last(engine, versions):
    _, _, path = versions
    dataset = load_dataset(path)
    with engine.connect() as conn:
        kb_id = conn.execute(sa.text("SELECT id FROM knowledge_bases WHERE name = :n"), {"n": KB}).scalar_one()
    older = _finished_run(engine, dataset, kb_id, "rrf-v1", "10 minutes")
    newer = _finished_run(engine, dataset, kb_id, "rrf-v1", "1 minute")
    _finalize(engine, newer, dataset)  # the newer run finishes first ...
    _finalize(engine, older, dataset)  # ... the older, slower one last
    with engine.connect() as conn:
        current = dict(conn.execute(sa.text(
            "SELECT id, is_current FROM retrieval_evaluation_runs WHERE id IN (:a, :b)"),
            {"a": older, "b": newer}).all())
    assert current == {newer: True, older: False}


def test_re_fusing_a_graded_run_reproduces_its_graded_metrics(engine, tmp_path):
    """Tuning reads the stored grades: the pool strategy's own fusion re-applied to a graded run's pools gives
    the stored per-case metrics (nDCG with graded gains), not binary ones."""
    import numpy as np

    from rag_pipeline.evaluation.pools import evaluate_fusion, load_pools
    from rag_pipeline_tests.evaluation.test_graded_evaluation import graded_cases

    chunks = ingest_tiny_kb(engine, "versions-graded-kb", tmp_path / "docs")
    dataset = load_dataset(write_dataset(tmp_path / "graded-pools.json", "versions-graded-kb", graded_cases(chunks)))
    strategy = get_strategy("hybrid-bm25-v1")
    outcome = evaluate_dataset(engine, dataset, strategy)
    with engine.connect() as conn:
        pools = load_pools(conn, outcome.run_id)
        stored = conn.execute(sa.text(
            f"SELECT case_id, {', '.join(METRIC_NAMES)} FROM retrieval_evaluation_case_results "
            "WHERE evaluation_run_id = :r ORDER BY case_index"), {"r": outcome.run_id}).mappings().all()
    assert sorted(pools.ideal_gains[0], reverse=True)[0] == 3.0, "the first case's best grade is 3"
    refused = evaluate_fusion(pools, strategy)
    for metric in METRIC_NAMES:
        np.testing.assert_allclose(refused[metric], [row[metric] for row in stored], rtol=0, atol=1e-12,
                                   err_msg=metric)
