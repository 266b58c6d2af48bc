"""A click's strategies evaluated at once in forked processes store what they store one after the other, bit for
bit; a strategy that fails there does not stop the others; progress and log lines come back to the caller."""

from __future__ import annotations

import json
import logging
import pickle
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from rag_pipeline.contracts.errors import BadInputError, NotFoundError
from rag_pipeline.evaluation import click, shared_indexes
from rag_pipeline.evaluation.click import ClickRun, evaluate_click
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import EvaluationOutcome
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.retrieval.strategies import load_registry
from rag_pipeline.retrieval.trace import RetrievalError
from rag_pipeline_tests.eval_helpers import stored_pools

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = load_registry()
CLICK = ("hybrid-v1", "vector-v1", "bm25-v1", "hybrid-bm25-v1", "rrf-v1", "vector-exact-v1")
"""Two pairs sharing an HNSW leg, a keyword-only and an exact in-memory strategy: four lanes."""

CASE_ROWS = """SELECT case_index, case_id, retrieved_chunk_ids::text, first_relevant_rank, precision_at_k, recall_at_k,
                      reciprocal_rank, ndcg_at_k, hit_at_k, average_precision_at_k, r_precision, miss_reasons::text
               FROM retrieval_evaluation_case_results WHERE evaluation_run_id = :r ORDER BY case_index"""


def _cases(engine, run_id) -> list:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(CASE_ROWS), {"r": run_id})]


def _click(engine, versions, **kwargs):
    dataset = load_dataset(ROOT / "datasets" / "demo.json")
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, dataset.knowledge_base)
    return evaluate_click(engine, dataset, kb, [ClickRun(REGISTRY[v]) for v in versions], **kwargs)


def test_strategies_forked_at_once_store_what_they_store_one_after_the_other(engine, demo_kb, caplog):
    shared_indexes.clear()
    alone = _click(engine, CLICK, processes=1)  # one after the other, in this process
    seen: dict[str, set] = {}

    def progress(version: str, cases: int):
        def report(done: int, total: int) -> None:
            assert total == cases
            seen.setdefault(version, set()).add((done, threading.current_thread().name))
        return report

    shared_indexes.clear()
    with caplog.at_level(logging.INFO):
        forked = _click(engine, CLICK, processes=2, progress=progress)
    assert all(isinstance(r, EvaluationOutcome) for r in alone + forked), list(alone + forked)
    assert [r.strategy_version for r in forked] == list(CLICK), "the outcomes in the order given"
    for a, f in zip(alone, forked, strict=True):
        assert a.run_id != f.run_id
        pools = stored_pools(engine, f.run_id)
        assert len(pools) > 0 and pools == stored_pools(engine, a.run_id), a.strategy_version  # every bit
        assert _cases(engine, f.run_id) == _cases(engine, a.run_id), a.strategy_version
        assert f.averages == a.averages and f.case_count == a.case_count == len(_cases(engine, a.run_id))
    # the forked processes' progress reached this process through the relay thread, to each strategy's callback
    assert set(seen) == set(CLICK)
    for version, reports in seen.items():
        assert {thread for _, thread in reports} == {"rag-click-relay"}, version
        assert max(done for done, _ in reports) == forked[0].case_count, version
    said = [r.getMessage() for r in caplog.records if r.name == click.__name__]
    assert sum("evaluation run" in m for m in said) == len(CLICK), "each run's log line, relayed"


def test_a_strategy_failing_in_a_forked_process_does_not_stop_the_others(engine, demo_kb):
    # vector-minilm-v1 needs vectors of all-minilm-l6-v2, which the demo knowledge base was not ingested with
    results = _click(engine, ("bm25-v1", "vector-minilm-v1", "vector-exact-v1"), processes=2)
    ok, failed, exact = results
    assert isinstance(ok, EvaluationOutcome) and isinstance(exact, EvaluationOutcome)
    assert isinstance(failed, RetrievalError), failed
    assert "all-minilm-l6-v2" in str(failed) and "vector-minilm-v1" in str(failed)


class _UnpicklableError(BadInputError):
    def __init__(self, message: str, handle: object):
        super().__init__(message)
        self.handle = handle


def test_an_error_that_cannot_travel_back_keeps_its_kind_and_message():
    exc = _UnpicklableError("dataset x: bad field", threading.Lock())
    with pytest.raises(TypeError):
        pickle.dumps(exc)
    back = pickle.loads(pickle.dumps(click.portable(exc)))
    assert type(back) is BadInputError and str(back) == "dataset x: bad field"
    found = NotFoundError("no such run")
    assert click.portable(found) is found, "a picklable error travels as it is"
    odd = _UnpicklableError.__new__(_UnpicklableError)  # half-made, not picklable: rebuilt as its kind
    odd.args, odd.handle = ("half-made",), threading.Lock()
    assert isinstance(click.portable(odd), BadInputError)


def test_lanes_keep_strategies_sharing_an_hnsw_leg_together():
    runs = [ClickRun(REGISTRY[v]) for v in CLICK]
    groups = click.lanes(runs, range(len(runs)))
    named = sorted(sorted(CLICK[i] for i in g) for g in groups)
    assert named == [["bm25-v1"], ["hybrid-bm25-v1", "rrf-v1"], ["hybrid-v1", "vector-v1"], ["vector-exact-v1"]]
    assert [len(g) for g in groups] == [2, 2, 1, 1], "the biggest lane first"


def test_evaluate_writes_the_reports_of_the_stored_runs_when_another_strategy_fails(engine, demo_kb, capsys,
                                                                                     tmp_path, monkeypatch):
    from rag_pipeline.cli import main

    real = click.evaluate_dataset

    def failing(engine, dataset, strategy, **kwargs):  # a fault injected into one strategy, in its process
        if strategy.version == "vector-v1":
            raise RetrievalError("case x: retrieval took longer than 60 s (RAG_STATEMENT_TIMEOUT_S)")
        return real(engine, dataset, strategy, **kwargs)

    monkeypatch.setattr(click, "evaluate_dataset", failing)
    output = tmp_path / "report.json"
    capsys.readouterr()
    rc = main(["evaluate", "--dataset", str(ROOT / "datasets" / "demo.json"), "--strategy", "bm25-v1",
               "--strategy", "vector-v1", "--strategy", "vector-exact-v1", "--output", str(output), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "RAG_STATEMENT_TIMEOUT_S" in err and "Traceback" not in err
    assert not (tmp_path / "report-vector-v1.json").exists()
    for version in ("bm25-v1", "vector-exact-v1"):  # stored, so reported, though another strategy failed
        written = tmp_path / f"report-{version}.json"
        assert f"report: {written}" in err, err
        summary = json.loads(written.read_text(encoding="utf-8"))["summary"]
        assert (summary["strategy_version"], summary["status"]) == (version, "succeeded")
