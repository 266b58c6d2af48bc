"""A queued run that fails in its Dagster step stores its one-line reason in the run row, and every front end
shows that reason whole: CLI ``runs``, the API's run, the console's run page and dataset history. The failures are
real ones of :func:`rag_pipeline.service.evaluations.evaluate_stored` (what the Dagster step calls): a rerank
stage whose model the knowledge base lacks, and a reader count the connection pool cannot serve (raised inside the
evaluation, before its own error handling)."""

from __future__ import annotations

import html as html_lib
import json
import uuid

import pytest
import sqlalchemy as sa

from rag_pipeline.cli.main import main as cli
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.retrieval.strategies import StrategyError, get_strategy
from rag_pipeline.retrieval.strategy_store import register_strategy
from rag_pipeline.service import evaluations, stored_datasets
from rag_pipeline.service.queued_runs import queue_evaluations
from rag_pipeline.storage.snapshot_readers import TooManyReadersError

API = "/api/v1"
RERANK = "hybrid-bm25-rerank-minilm-v1"


def _queued_row(engine, kb: str, dataset_id: str, version: str) -> str:
    """A queued run row as the API makes one (for a strategy the rule would refuse today: queued earlier)."""
    strategy = get_strategy(version)
    with engine.begin() as conn:
        kb_id = conn.execute(sa.text("SELECT id FROM knowledge_bases WHERE name = :n"), {"n": kb}).scalar()
        params_hash = register_strategy(conn, strategy)
        run_id = run_records.create_run(conn, dataset_id=dataset_id, knowledge_base_id=kb_id, strategy=strategy,
                                        params_hash=params_hash, partition_key=f"x|{version}",
                                        dagster_run_id=str(uuid.uuid4()), queued=True)
    return str(run_id)


def _row(engine, run_id: str):
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT status, error FROM retrieval_evaluation_runs WHERE id = :id"),
                            {"id": run_id}).one()


def test_a_failed_step_stores_its_reason_and_every_front_end_shows_it_whole(client, evaluated, engine, capsys,
                                                                            monkeypatch):
    monkeypatch.delenv("RAG_DAGSTER_UI_URL", raising=False)
    name = f"fail-{uuid.uuid4().hex[:6]}"
    kb = evaluated["kb"]
    stored = stored_datasets.store_uploaded_dataset(engine, kb, json.dumps({"cases": evaluated["cases"]}),
                                                    source="test", name=name)
    rerank_run = _queued_row(engine, kb, stored.dataset_id, RERANK)
    with pytest.raises(StrategyError):
        evaluations.evaluate_stored(engine, stored.dataset_id, RERANK, queued_run_id=rerank_run)
    status, error = _row(engine, rerank_run)
    assert status == "failed" and error.startswith(f"StrategyError: strategy {RERANK} cannot run on knowledge base")
    assert "'all-minilm-l6-v2' embeddings for the rerank stage" in error and "\n" not in error

    [queued] = queue_evaluations(engine, kb, stored.dataset_id, ["keyword-v1"]).runs
    with pytest.raises(TooManyReadersError):  # raised inside evaluate_dataset, before its own try
        evaluations.evaluate_stored(engine, stored.dataset_id, "keyword-v1", readers=10_000,
                                    queued_run_id=queued.run_id)
    status, pool_error = _row(engine, queued.run_id)
    assert status == "failed" and pool_error.startswith("TooManyReadersError: --readers 10000 needs"), pool_error

    capsys.readouterr()
    assert cli(["runs", "--knowledge-base", kb, "--dataset", name]) == 0
    out = capsys.readouterr().out
    assert "why runs did not succeed:" in out
    assert f"{rerank_run[:8]} {RERANK} (failed): {error}" in out and pool_error in out, out

    summary = client.get(f"{API}/retrieval/evaluations/{rerank_run}").json()["summary"]
    assert summary["status"] == "failed" and summary["error"] == error
    run_page = html_lib.unescape(client.get(f"/admin/retrieval-evaluations/runs/{rerank_run}").text)
    assert error in run_page
    assert f'<a href="http://127.0.0.1:3000/runs/{summary["dagster_run_id"]}">' in run_page, "links the Dagster UI"
    history = html_lib.unescape(client.get(f"/admin/retrieval-evaluations/kb/{kb}/datasets/{name}").text)
    assert error in history and pool_error in history, "the dataset's history shows each reason whole"
