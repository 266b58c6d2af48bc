"""Fusion tuning on real stored runs: a small real knowledge base (real USE embeddings, BM25 in Postgres),
real evaluation runs, re-fusion of their stored pools, real runs of the emitted strategies, and the
``rag-pipeline tune`` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from rag_pipeline.analysis.tuning.stored_run import TuneError, find_pool_run, tune_run
from rag_pipeline.analysis.tuning.sweep import FusionConfig
from rag_pipeline.cli import main
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.evaluation.metrics import METRIC_NAMES
from rag_pipeline.evaluation.pools import evaluate_fusion, load_pools
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.sources import SourceDocument
from rag_pipeline.retrieval.registry_file import RegistryConflictError, write_strategy
from rag_pipeline.retrieval.strategies import PACKAGED_STRATEGIES_FILE, get_strategy, load_registry
from rag_pipeline_tests.eval_helpers import fused_ranks

POOL_STRATEGY = "hybrid-bm25-v1"
RAG = Path(sys.executable).with_name("rag-pipeline")

DOCS = {
    "backup.md": "Nightly backups use pg_basebackup with continuous archiving of the write-ahead log. "
                 "Restores are rehearsed every quarter on a scratch server.",
    "restore.md": "To restore a database, fetch the latest base backup, replay the archived WAL segments "
                  "and stop at the recovery target time.",
    "coffee.md": "The office coffee machine is descaled every Friday. Oat milk is in the left fridge.",
    "monorepo.md": "Keeping every service in one repository allows atomic commits across services and a "
                   "single version of each third-party library.",
    "onboarding.md": "New hires get a laptop on day one, meet their buddy, and ship a small change in their "
                     "first week.",
    "vacation.md": "Employees have twenty-five days of paid leave per year; up to five unused days carry over.",
    "vpn.md": "Connect to the office VPN with the WireGuard client; tokens expire after thirty days.",
    "expenses.md": "Travel expenses are reimbursed when the receipt is uploaded within thirty days of the trip.",
    "oncall.md": "The on-call engineer answers pages within fifteen minutes and writes a postmortem for "
                 "every outage.",
    "security.md": "Passwords are stored with argon2; laptops use full-disk encryption and a screen lock.",
    # distractors: they share words with the questions but answer none of them
    "backup-policy.md": "The backup policy document lists owners; backups of laptops are the user's job.",
    "leave-form.md": "The leave request form lives in the HR portal under forms and days off.",
    "kitchen.md": "Kitchen rules: clean the fridge on Fridays and do not leave mugs in the sink.",
    "repo-stats.md": "Our repository has four hundred services and ten thousand commits per month.",
    "travel.md": "Book travel through the portal; trains are preferred for trips under four hours.",
}
QUESTIONS = [  # (case id, question, relevant documents, k)
    ("backup", "How are the nightly backups taken?", ["backup.md", "restore.md"], 3),
    ("restore", "replay archived WAL to a recovery target", ["restore.md"], 2),
    ("coffee", "When is the coffee machine cleaned?", ["coffee.md"], 2),
    ("monorepo", "Why keep all services in one repository?", ["monorepo.md"], 3),
    ("onboarding", "What does a new employee do in the first week?", ["onboarding.md"], 3),
    ("leave", "How many holidays do I get and can I carry them over?", ["vacation.md"], 2),
    ("vpn", "WireGuard token expiry", ["vpn.md"], 1),
    ("expenses", "How do I get my travel costs paid back?", ["expenses.md"], 3),
    ("oncall", "What must the on-call person write after an outage?", ["oncall.md"], 2),
    ("security", "How are laptops and passwords protected?", ["security.md", "vpn.md"], 4),
    ("thirty", "thirty days", ["vpn.md", "expenses.md"], 3),
    ("milk", "Where is the oat milk?", ["coffee.md"], 1),
    ("days-off", "days off per year", ["vacation.md"], 2),
    ("laptop", "what happens with my laptop", ["onboarding.md", "security.md"], 3),
    ("trip", "reimbursement after a trip", ["expenses.md"], 2),
    ("commits", "atomic commits across many services", ["monorepo.md"], 2),
]


def build_world(engine, folder: Path, knowledge_base: str, name: str) -> tuple[Path, dict[str, str]]:
    """Ingest :data:`DOCS` (one chunk each, real USE embeddings) and write the dataset file ``name``."""
    ingest_documents(engine, [SourceDocument(n, None, t) for n, t in DOCS.items()], knowledge_base,
                     text_search="english", chunk_size=None)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT d.original_name, c.id::text AS id FROM document_chunks c JOIN documents d ON d.id = c.document_id "
            "JOIN knowledge_bases kb ON kb.id = c.knowledge_base_id WHERE kb.name = :n AND c.is_current"),
            {"n": knowledge_base}).all()
    chunks = {r.original_name: r.id for r in rows}
    assert set(chunks) == set(DOCS)
    cases = [{"case_id": cid, "question": q, "k": k, "relevant_chunk_ids": [chunks[d] for d in docs]}
             for cid, q, docs, k in QUESTIONS]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"name": name, "knowledge_base": knowledge_base, "cases": cases}), encoding="utf-8")
    return path, chunks


@pytest.fixture(scope="module")
def world(engine, tmp_path_factory):
    suffix = uuid.uuid4().hex[:8]
    path, _ = build_world(engine, tmp_path_factory.mktemp("tune_db"), f"tune-kb-{suffix}", f"tune-ds-{suffix}")
    dataset = load_dataset(path)
    outcomes = {v: evaluate_dataset(engine, dataset, get_strategy(v)) for v in (POOL_STRATEGY, "hybrid-v1")}
    return dataset, path, outcomes


def _stored_case_metrics(engine, run_id) -> dict[str, np.ndarray]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            f"SELECT {', '.join(METRIC_NAMES)} FROM retrieval_evaluation_case_results "
            "WHERE evaluation_run_id = :r ORDER BY case_index"), {"r": run_id}).all()
    return {m: np.array([getattr(r, m) for r in rows], dtype=float) for m in METRIC_NAMES}


def _pool_signature(engine, run_id) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(
            "SELECT case_id, chunk_id::text, vector_score, vector_rank, keyword_score, keyword_rank "
            "FROM retrieval_evaluation_candidates WHERE evaluation_run_id = :r ORDER BY case_id, chunk_id"),
            {"r": run_id})]


@pytest.mark.parametrize("version", [POOL_STRATEGY, "hybrid-v1", "rrf-v1"])
def test_refusing_a_real_run_with_its_own_strategy_reproduces_its_ranks_and_metrics(engine, world, version):
    dataset, _, outcomes = world
    outcome = outcomes.get(version) or evaluate_dataset(engine, dataset, get_strategy(version))
    with engine.connect() as conn:
        pools = load_pools(conn, outcome.run_id)
    strategy = get_strategy(version)
    assert pools.strategy_version == version and pools.n_cases == len(QUESTIONS)
    assert pools.mask.sum() == outcome.candidate_count
    np.testing.assert_array_equal(fused_ranks(pools, strategy), pools.stored_rank)
    refused = evaluate_fusion(pools, strategy)
    stored = _stored_case_metrics(engine, outcome.run_id)
    for metric in METRIC_NAMES:
        np.testing.assert_allclose(refused[metric], stored[metric], rtol=0, atol=1e-12, err_msg=metric)
        assert abs(refused[metric].mean() - outcome.averages[metric]) <= 1e-12


def test_emitted_strategies_run_for_real_reproduce_the_sweeps_predictions(engine, world, tmp_path, monkeypatch):
    dataset, _, outcomes = world
    pool_outcome = outcomes[POOL_STRATEGY]
    tag = uuid.uuid4().hex[:6]
    with engine.connect() as conn:
        result, rec = tune_run(conn, dataset.name, POOL_STRATEGY, folds=4, version=f"tuned-{tag}", n_resamples=2000)
    assert result.pool_run_id == pool_outcome.run_id and rec.base == get_strategy(POOL_STRATEGY)
    assert rec.cv.fold_of.size == len(QUESTIONS) and len(rec.cv.chosen) == 4
    assert rec.cv.mean <= rec.predicted_mean + 1e-12 and rec.cv.ci[0] <= rec.cv.mean <= rec.cv.ci[1]
    assert 0 < rec.recall_ceiling <= 1
    sweep = rec.sweep
    # the recommendation, plus configurations of every other kind, each added to a registry file and run
    extra = [FusionConfig("rrf", "none", 1.0, 1.0, 5), FusionConfig("weighted", "rank", 0.25, 0.75),
             FusionConfig("weighted", "dbsf", 0.6, 0.4), FusionConfig("weighted", "zscore", 0.45, 0.55)]
    strategies = [rec.strategy] + [c.apply_to(rec.base, f"tuned-{tag}-{i}") for i, c in enumerate(extra)]
    registry_file = tmp_path / "registry.yaml"
    for strategy in strategies:
        assert write_strategy(registry_file, strategy, "written by a test") == "appended"
    assert write_strategy(registry_file, rec.strategy) == "unchanged"
    registry = load_registry(registry_file)
    assert set(load_registry(PACKAGED_STRATEGIES_FILE)) < set(registry), "a new file starts from the registry"
    monkeypatch.setenv("RAG_STRATEGIES_FILE", str(registry_file))
    base_pools = _pool_signature(engine, pool_outcome.run_id)
    for strategy in strategies:
        loaded = get_strategy(strategy.version)
        assert loaded == strategy and loaded.params_hash() == strategy.params_hash()
        outcome = evaluate_dataset(engine, dataset, loaded)
        assert _pool_signature(engine, outcome.run_id) == base_pools, "same candidate ks, same pools"
        index = sweep.configs.index(FusionConfig.from_strategy(loaded))
        stored = _stored_case_metrics(engine, outcome.run_id)
        for metric in METRIC_NAMES:
            assert abs(outcome.averages[metric] - sweep.per_case[metric][index].mean()) <= 1e-9, metric
            np.testing.assert_allclose(stored[metric], sweep.per_case[metric][index], rtol=0, atol=1e-12)
        if strategy is rec.strategy:
            assert abs(outcome.averages[rec.metric] - rec.predicted_mean) <= 1e-9


def test_find_pool_run_errors_and_name_clashes(engine, world, tmp_path):
    dataset, _, _ = world
    with engine.connect() as conn:
        with pytest.raises(TuneError, match=rf"partition '{dataset.name}\|bm25-v1'.*current runs on this dataset: "):
            find_pool_run(conn, dataset.name, "bm25-v1")
        with pytest.raises(TuneError, match="no current succeeded run of strategy 'hybrid-bm25-v1' on dataset"):
            find_pool_run(conn, "no-such-dataset")
        run = find_pool_run(conn, dataset.name, "hybrid-v1")  # shallow pools (10 + 10): a note says so
        assert any("shallow pools" in n for n in run.notes)
        with pytest.raises(ValueError, match="folds"):
            tune_run(conn, dataset.name, folds=len(QUESTIONS) + 1)
        with pytest.raises(ValueError, match="unknown metric"):
            tune_run(conn, dataset.name, metric="accuracy")
        result, rec = tune_run(conn, dataset.name, version="hybrid-v1", n_resamples=500)  # an existing version name
    assert any("already run with other parameters" in n for n in result.notes)
    registry_file = tmp_path / "clash.yaml"
    registry_file.write_text(PACKAGED_STRATEGIES_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(RegistryConflictError, match="already defines strategy 'hybrid-v1' with other parameters"):
        write_strategy(registry_file, rec.strategy)


def test_cli_tune_json_and_write_strategy(engine, world, tmp_path):
    dataset, path, _ = world
    registry_file = tmp_path / "tuned.yaml"
    version = f"cli-tuned-{uuid.uuid4().hex[:6]}"
    proc = subprocess.run([str(RAG), "tune", "--dataset", str(path), "--folds", "3", "--version", version,
                           "--resamples", "2000", "--format", "json", "--write-strategy", str(registry_file)],
                          env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    for key in ("dataset", "knowledge_base", "pool_run_id", "pool_strategy", "metric", "cv_mean", "cv_ci",
                "predicted_mean", "base_mean", "gain", "gain_ci", "p_value", "recall_ceiling", "recommended",
                "recommended_version", "fold_choices", "per_fold", "top_configurations", "strategy", "yaml",
                "written"):
        assert key in out, key
    assert (out["dataset"], out["pool_strategy"], out["metric"]) == (dataset.name, POOL_STRATEGY, "ndcg_at_k")
    assert out["recommended_version"] == version and len(out["per_fold"]) == 3
    assert len(out["top_configurations"]) == 10 and out["top_configurations"][0]["is_recommended"]
    assert out["written"]["status"] == "appended"
    registry = load_registry(registry_file)
    assert registry[version].params() == {k: v for k, v in out["strategy"].items()
                                          if k not in ("version", "description")}
    assert "  # tuned by `rag-pipeline tune`" in registry_file.read_text(encoding="utf-8")

    code = main(["tune", "--dataset", dataset.name, "--version", version, "--resamples", "500"])
    assert code == 0
    code = main(["tune", "--dataset", "no-such-dataset"])
    assert code == 2


def test_cli_tune_text(world, capsys):
    dataset, _, _ = world
    assert main(["tune", "--dataset", dataset.name, "--folds", "3", "--resamples", "500", "--top", "5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Fusion tuning of {POOL_STRATEGY} on dataset {dataset.name}")
    for text in ("cross-validated ndcg_at_k", "95% CI", "gain (CV vs own fusion)", "recall ceiling",
                 "fold 3:", "top 5 configurations", f"  - version: {POOL_STRATEGY}-tuned-ndcg_at_k"):
        assert text in out, text
    with pytest.raises(SystemExit) as exited:  # the parser refuses it (bounded flag), exit 2
        main(["tune", "--dataset", dataset.name, "--metric", "recall_at_k", "--folds", "1"])
    assert exited.value.code == 2
    assert "argument --folds: expected an integer between 2 and 1000000, got 1" in capsys.readouterr().err
    assert main(["tune", "--dataset", dataset.name, "--folds", "999"]) == 2, "more folds than cases"
    assert "--folds must be between 2 and the number of cases" in capsys.readouterr().err
