"""Runs with complete pools and a rerank stage, stored and re-fused: ``rerank_score`` in the candidate table equals
the trace's; re-applying the run's own stage configuration to the stored pools reproduces its ranks and metrics;
``tune --train-dataset`` chooses on one dataset and reports on the other, and never calls a number tuned on the
reported cases an estimate."""

from __future__ import annotations

import json
import uuid

import jsonschema
import numpy as np
import pytest
import sqlalchemy as sa

from rag_pipeline.analysis.tuning.stages import StageConfig, evaluate_stage_configs, stage_grid, stage_order, tune_split
from rag_pipeline.analysis.tuning.stored_run import TuneError
from rag_pipeline.cli import main
from rag_pipeline.contracts.reports import Report, json_schema
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.evaluation.metrics import METRIC_NAMES
from rag_pipeline.evaluation.pools import load_pools
from rag_pipeline.knowledge_base import chunking
from rag_pipeline.retrieval.search import hybrid_search_batch
from rag_pipeline.retrieval.strategies import Strategy
from rag_pipeline_tests.analysis.test_tuning_db import build_world
from rag_pipeline_tests.eval_helpers import build_report

# the report's JSON Schema is generated from its contract (it was a hand-written module)
REPORT_SCHEMA = json_schema(Report)
# the module fixture ingests and runs four evaluations
pytestmark = pytest.mark.slow

STAGED = Strategy(version="t-staged", vector_candidate_k=5, keyword_candidate_k=5, keyword_scorer="bm25",
                  normalization="minmax", vector_weight=0.5, keyword_weight=0.5, complete_pool=True,
                  rerank={"method": "embedding", "model": "use-multilingual-v3", "weight": 0.5})
TOP3 = STAGED.replace(version="t-staged-top3", rerank={**STAGED.rerank.model_dump(), "top_n": 3, "weight": 0.8})


@pytest.fixture(scope="module")
def world(engine, tmp_path_factory):
    suffix = uuid.uuid4().hex[:8]
    folder = tmp_path_factory.mktemp("stage_tune")
    kb = f"stage-kb-{suffix}"
    path, _ = build_world(engine, folder, kb, f"stage-all-{suffix}")
    data = json.loads(path.read_text())
    files = {}
    for part, cases in (("train", data["cases"][:10]), ("test", data["cases"][10:])):
        name = f"stage-{part}-{suffix}"
        files[part] = folder / f"{name}.json"
        files[part].write_text(json.dumps({"name": name, "knowledge_base": kb, "cases": cases}))
    runs = {(part, s.version): evaluate_dataset(engine, load_dataset(files[part]), s)
            for part in files for s in (STAGED, TOP3)}
    return kb, files, runs


def _candidates(engine, run_id) -> dict[str, list[tuple]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT case_id, chunk_id::text, rank, vector_score, vector_rank, keyword_score, keyword_rank, "
            "rerank_score, final_score FROM retrieval_evaluation_candidates WHERE evaluation_run_id = :r "
            "ORDER BY case_id, rank"), {"r": run_id}).all()
    out: dict[str, list[tuple]] = {}
    for r in rows:
        out.setdefault(r.case_id, []).append(tuple(r)[1:])
    return out


def test_stored_rerank_scores_equal_the_trace(engine, world) -> None:
    kb, files, runs = world
    dataset = load_dataset(files["train"])
    stored = _candidates(engine, runs[("train", STAGED.version)].run_id)
    with engine.begin() as conn:
        traces = hybrid_search_batch(conn, knowledge_base_id=chunking.knowledge_base_id(kb),
                                     queries=[c.question for c in dataset.cases], strategy=STAGED)
    completed = 0
    for case, trace in zip(dataset.cases, traces, strict=True):
        rows = stored[case.case_id]
        assert [r[0] for r in rows] == [c.chunk_id for c in trace.candidates]
        for row, c in zip(rows, trace.candidates, strict=True):
            assert row[6] == pytest.approx(c.rerank_score, abs=1e-6) and row[6] is not None
            assert (row[3] is None) == (c.vector_rank is None) and row[2] is not None and row[4] is not None
            assert (row[5] is None) == (c.keyword_rank is None)
            completed += (row[3] is None) + (row[5] is None)
    assert completed > 0


@pytest.mark.parametrize("strategy", [STAGED, TOP3], ids=["whole-pool", "top3"])
def test_own_stage_configuration_reproduces_the_run(engine, world, strategy) -> None:
    _, _, runs = world
    outcome = runs[("train", strategy.version)]
    with engine.connect() as conn:
        pools = load_pools(conn, outcome.run_id)
    own = StageConfig.from_strategy(strategy)
    top_n = strategy.rerank.top_n
    order = stage_order(pools, own, top_n)
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(1, pools.pool_size + 1), axis=1)
    np.testing.assert_array_equal(np.where(pools.mask, ranks, 0), pools.stored_rank)
    values = evaluate_stage_configs(pools, (own,), top_n)
    for metric in METRIC_NAMES:
        assert abs(values[metric][0].mean() - outcome.averages[metric]) <= 1e-12, metric
    configs = stage_grid(strategy, pools)
    assert configs[0] == own
    if top_n is None:  # completion on/off and the first stage are swept too
        assert {c.complete for c in configs} == {False, True} and len({c.first for c in configs}) > 10
    else:  # only the stored top_n has rerank scores: the first stage stays
        assert {(c.first, c.complete) for c in configs} == {(own.first, own.complete)}


def test_tune_split_chooses_on_train_and_reports_on_test(engine, world) -> None:
    _, files, runs = world
    train, test = files["train"].stem, files["test"].stem
    with engine.connect() as conn:
        result, strategy = tune_split(conn, test, train, STAGED.version, n_resamples=200)
        same, _ = tune_split(conn, train, None, STAGED.version, n_resamples=200)
        with pytest.raises(TuneError, match="no current succeeded run of strategy 'hybrid-v1'"):
            tune_split(conn, test, train, "hybrid-v1", n_resamples=200)
    assert result.train.dataset == train and result.test.dataset == test
    assert result.train.in_sample_mean == pytest.approx(result.top_configurations[0].train_mean)
    assert result.top_configurations[0].is_chosen and result.top_configurations[0].label == result.chosen
    assert result.train.own_mean == pytest.approx(runs[("train", STAGED.version)].averages["ndcg_at_k"], abs=1e-12)
    assert result.test.own_mean == pytest.approx(runs[("test", STAGED.version)].averages["ndcg_at_k"], abs=1e-12)
    assert result.estimate == result.test.chosen_mean and result.estimate_source == "held-out test dataset"
    assert same.test is None and same.estimate == same.train.cv_mean
    assert StageConfig.from_strategy(strategy).label == result.chosen and strategy.version == result.recommended_version


def test_cli_tune_train_dataset_prints_both_and_labels_the_estimate(engine, world, capsys) -> None:
    _, files, _ = world
    assert main(["tune", "--dataset", str(files["test"]), "--train-dataset", str(files["train"]),
                 "--pool-strategy", STAGED.version, "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    assert f"chosen on  {files['train'].stem}" in out
    assert "(tuned on these cases: NOT an estimate)" in out
    assert f"on {files['test'].stem} (held out" in out and "<- the estimate (chosen without these cases)" in out
    assert "rerank:" in out and "complete_pool:" in out
    assert main(["tune", "--dataset", str(files["train"]), "--train-dataset", str(files["train"]),
                 "--pool-strategy", STAGED.version, "--resamples", "200", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["test"] is None and data["estimate"] == data["train"]["cv_mean"]
    assert any("not an estimate" in n for n in data["notes"])


def test_report_shows_both_ranks_rerank_score_and_completed_scores(engine, world) -> None:
    kb, files, runs = world
    dataset = load_dataset(files["train"])
    outcome = runs[("train", STAGED.version)]
    with engine.connect() as conn:
        report = build_report(conn, outcome.run_id, candidates="all")
        relevant_only = build_report(conn, outcome.run_id, candidates="relevant")
    jsonschema.validate(report, REPORT_SCHEMA)
    every = {(case["case_id"], c["chunk_id"]): c["first_stage_rank"] for case in report["cases"]
             for c in case["candidates"]}
    listed = [(case["case_id"], c["chunk_id"], c["first_stage_rank"]) for case in relevant_only["cases"]
              for c in case["candidates"]]
    assert listed and all(every[(case, chunk)] == rank for case, chunk, rank in listed)  # from the whole pool
    with engine.begin() as conn:
        traces = hybrid_search_batch(conn, knowledge_base_id=chunking.knowledge_base_id(kb),
                                     queries=[c.question for c in dataset.cases], strategy=STAGED)
    flags = 0
    for case, trace in zip(report["cases"], traces, strict=True):
        for shown, c in zip(case["candidates"], trace.candidates, strict=True):
            assert (shown["chunk_id"], shown["rank"], shown["first_stage_rank"]) == (c.chunk_id, c.rank,
                                                                                    c.first_stage_rank)
            assert shown["rerank_score"] == pytest.approx(c.rerank_score, abs=1e-6)
            assert shown["vector_completed"] == (c.vector_rank is None)
            assert shown["keyword_completed"] == (c.keyword_rank is None)
            flags += shown["vector_completed"] + shown["keyword_completed"]
        pool_reasons = [m for m in case["miss_reasons"] if m.get("rank") is not None]
        by_id = {c.chunk_id: c for c in trace.candidates}
        assert all(m["first_stage_rank"] == by_id[m["chunk_id"]].first_stage_rank for m in pool_reasons)
    assert flags > 0
