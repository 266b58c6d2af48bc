"""End-to-end evaluation on real Postgres + the real USE model: rows, hand-computed metrics, atomicity,
history, abandoned runs, and the offline CLI's report (JSON schema, equal to the database)."""

from __future__ import annotations

import json
import math

import jsonschema
import pytest
import sqlalchemy as sa

from rag_pipeline.contracts.reports import Report, json_schema
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import TIMING_KEYS, evaluate_dataset
from rag_pipeline.evaluation.metrics import METRIC_NAMES
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.evaluation.runs import results as persistence
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline_tests.eval_helpers import build_report, ingest_tiny_kb, run_rows, tiny_cases, write_dataset

# the report's JSON Schema is generated from its contract (it was a hand-written module)
REPORT_SCHEMA = json_schema(Report)

KB = "eval-tiny"


@pytest.fixture(scope="module")
def tiny(engine, tmp_path_factory):
    """(chunk ids by document, dataset path) of a tiny real knowledge base."""
    folder = tmp_path_factory.mktemp("tiny_kb")
    chunks = ingest_tiny_kb(engine, KB, folder / "docs")
    path = write_dataset(folder / "tiny.json", KB, tiny_cases(chunks), name="tiny-core")
    return chunks, path


def _run(engine, run_id) -> sa.Row:
    with engine.connect() as conn:
        return run_records.get_run(conn, run_id)


def test_evaluation_stores_runs_candidates_and_case_results(engine, tiny):
    chunks, path = tiny
    dataset = load_dataset(path)
    outcome = evaluate_dataset(engine, dataset, get_strategy("hybrid-v1"), batch_size=2)
    run = _run(engine, outcome.run_id)
    assert (run.status, run.is_current, run.case_count) == ("succeeded", True, len(dataset.cases))
    assert run.params_hash == get_strategy("hybrid-v1").params_hash()
    assert run.embedding_model == "use-multilingual-v3"
    assert set(run.timings) == set(TIMING_KEYS)
    cands, cases = run_rows(engine, outcome.run_id)
    assert (cands, cases) == (run.candidate_count, len(dataset.cases))
    assert cands == 5 * len(dataset.cases), "the vector leg returns all 5 chunks of the tiny KB for every case"
    with engine.connect() as conn:
        per_case = conn.execute(sa.text(
            "SELECT r.case_id, r.k, jsonb_array_length(r.retrieved_chunk_ids) AS n, "
            "count(*) FILTER (WHERE c.is_selected) AS selected, "
            "count(*) FILTER (WHERE c.is_relevant) AS relevant, min(c.rank) AS lo, max(c.rank) AS hi "
            "FROM retrieval_evaluation_case_results r JOIN retrieval_evaluation_candidates c "
            "ON c.evaluation_run_id = r.evaluation_run_id AND c.case_id = r.case_id "
            "WHERE r.evaluation_run_id = :r GROUP BY r.case_id, r.k, r.retrieved_chunk_ids"),
            {"r": outcome.run_id}).all()
        averages = conn.execute(sa.text(
            "SELECT " + ", ".join(f"avg({m}) AS {m}" for m in METRIC_NAMES) +
            " FROM retrieval_evaluation_case_results WHERE evaluation_run_id = :r"), {"r": outcome.run_id}).one()
    for row in per_case:
        assert row.selected == row.n == min(row.k, 5) and (row.lo, row.hi) == (1, 5)
    by_case = {r.case_id: r for r in per_case}
    assert by_case["backup-001"].relevant == 2 and by_case["monorepo-001"].relevant == 1
    for m in METRIC_NAMES:
        assert getattr(run, m) == pytest.approx(getattr(averages, m))
        assert outcome.averages[m] == pytest.approx(getattr(run, m))


def test_metrics_of_one_case_match_a_hand_computation(engine, tiny):
    """keyword-v1: only backup.md contains 'basebackup'/'archiving', so the pool of backup-001 is exactly
    [backup.md]; relevant = {backup.md, coffee.md}, k = 3."""
    chunks, path = tiny
    outcome = evaluate_dataset(engine, load_dataset(path), get_strategy("keyword-v1"))
    with engine.connect() as conn:
        pool = conn.execute(sa.text(
            "SELECT chunk_id::text, rank, is_relevant, is_selected, vector_score, keyword_score, keyword_rank "
            "FROM retrieval_evaluation_candidates WHERE evaluation_run_id = :r AND case_id = 'backup-001'"),
            {"r": outcome.run_id}).all()
        case = conn.execute(sa.text("SELECT * FROM retrieval_evaluation_case_results "
                                    "WHERE evaluation_run_id = :r AND case_id = 'backup-001'"),
                            {"r": outcome.run_id}).one()
    assert [(p.chunk_id, p.rank, p.is_relevant, p.is_selected) for p in pool] == [(chunks["backup.md"], 1, True, True)]
    assert pool[0].vector_score is None and pool[0].keyword_score > 0 and pool[0].keyword_rank == 1
    # ranking [backup]; relevant {backup, coffee}; k = 3
    assert case.precision_at_k == pytest.approx(1 / 3)
    assert case.recall_at_k == pytest.approx(1 / 2)
    assert case.reciprocal_rank == pytest.approx(1.0)
    assert case.ndcg_at_k == pytest.approx(1.0 / (1.0 + 1.0 / math.log2(3)))
    assert case.hit_at_k == 1.0
    assert case.average_precision_at_k == pytest.approx(1 / 2)
    assert case.r_precision == pytest.approx(1 / 2)
    assert case.first_relevant_rank == 1
    assert case.retrieved_chunk_ids == [chunks["backup.md"]]


def test_failure_mid_run_leaves_no_partial_run(engine, tiny, monkeypatch):
    _, path = tiny
    dataset = load_dataset(path)
    strategy = get_strategy("vector-v1")
    good = evaluate_dataset(engine, dataset, strategy, batch_size=2)
    def failing_copy(conn, rows):  # the run's pools are already written inside the transaction
        raise RuntimeError("injected failure after the pools were written")

    monkeypatch.setattr(persistence, "copy_case_results", failing_copy)
    with pytest.raises(RuntimeError, match="injected failure"):
        evaluate_dataset(engine, dataset, strategy, batch_size=2)
    with engine.connect() as conn:
        failed = conn.execute(sa.text(
            "SELECT id, status, is_current, error, finished_at FROM retrieval_evaluation_runs "
            "WHERE strategy_version = 'vector-v1' AND status <> 'succeeded'")).all()
    assert len(failed) == 1 and failed[0].status == "failed" and not failed[0].is_current
    assert "injected failure after the pools were written" in failed[0].error and failed[0].finished_at
    assert run_rows(engine, failed[0].id) == (0, 0), "no orphan candidates or case results"
    still = _run(engine, good.run_id)
    assert still.is_current and still.status == "succeeded"
    assert run_rows(engine, good.run_id) == (still.candidate_count, still.case_count)


def test_rerun_keeps_history_with_exactly_one_current_run(engine, tiny):
    _, path = tiny
    dataset = load_dataset(path)
    strategy = get_strategy("bm25-v1")
    first = evaluate_dataset(engine, dataset, strategy)
    second = evaluate_dataset(engine, dataset, strategy)
    assert first.run_id != second.run_id and first.dataset_id == second.dataset_id
    with engine.connect() as conn:
        history = run_records.list_runs(conn, dataset="tiny-core", strategy="bm25-v1")
        dupes = conn.execute(sa.text(
            "SELECT count(*) FROM (SELECT evaluation_run_id, case_id, rank FROM retrieval_evaluation_candidates "
            "GROUP BY 1, 2, 3 HAVING count(*) > 1) d")).scalar_one()
        datasets = conn.execute(sa.text("SELECT count(*) FROM retrieval_evaluation_datasets "
                                        "WHERE name = 'tiny-core'")).scalar_one()
    assert [str(r.id) for r in history] == [second.run_id, first.run_id]
    assert [r.is_current for r in history] == [True, False]
    assert all(r.status == "succeeded" for r in history)
    assert run_rows(engine, first.run_id) == run_rows(engine, second.run_id)
    assert first.averages == second.averages
    assert dupes == 0 and datasets == 1


def test_stale_running_run_is_abandoned(engine, tiny):
    _, path = tiny
    dataset = load_dataset(path)
    strategy = get_strategy("hybrid-v1")
    with engine.begin() as conn:
        kb_id = conn.execute(sa.text("SELECT id FROM knowledge_bases WHERE name = :n"), {"n": KB}).scalar_one()
        dataset_id = persistence.store_dataset(conn, dataset, KB)
    run_id = run_records.create_run(engine, dataset_id=dataset_id, knowledge_base_id=kb_id, strategy=strategy,
                             params_hash=strategy.params_hash())
    assert _run(engine, run_id).status == "running"
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE retrieval_evaluation_runs SET heartbeat_at = now() - interval '2 hours' "
                             "WHERE id = :id"), {"id": run_id})
    assert _run(engine, run_id).status == "abandoned", "a stale heartbeat reads as abandoned at once"
    assert run_records.sweep_abandoned(engine) >= 1
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT status, error FROM retrieval_evaluation_runs WHERE id = :id"),
                           {"id": run_id}).one()
    assert row.status == "abandoned" and "no heartbeat" in row.error


def test_offline_cli_report_validates_and_equals_the_database(engine, tiny, tmp_path, capsys):
    from rag_pipeline.cli import main

    chunks, path = tiny
    out = tmp_path / "report.json"
    assert main(["evaluate", "--knowledge-base", KB, "--dataset", str(path), "--output", str(out), "--quiet",
                 "--candidates", "all"]) == 0
    stdout = capsys.readouterr().out
    report = json.loads(out.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(REPORT_SCHEMA)
    jsonschema.validate(report, REPORT_SCHEMA, format_checker=jsonschema.FormatChecker())
    summary = report["summary"]
    assert summary["strategy_version"] == "hybrid-v1" and summary["run_id"][:8] in stdout  # the table's short id
    with engine.connect() as conn:
        assert report == build_report(conn, summary["run_id"], candidates="all")
        run = run_records.get_run(conn, summary["run_id"])
        stored = conn.execute(sa.text("SELECT case_id, ndcg_at_k FROM retrieval_evaluation_case_results "
                                      "WHERE evaluation_run_id = :r"), {"r": run.id}).all()
    assert [c["case_id"] for c in report["cases"]] == [c["case_id"] for c in tiny_cases(chunks)]
    assert {c["case_id"]: c["metrics"]["ndcg_at_k"] for c in report["cases"]} == dict(stored)
    assert sum(len(c["candidates"]) for c in report["cases"]) == run.candidate_count == summary["candidate_count"]
    for m in ("precision_at_k", "recall_at_k", "reciprocal_rank", "ndcg_at_k"):
        assert summary[m] == getattr(run, m)
    assert all("content" not in cand for c in report["cases"] for cand in c["candidates"])

    assert main(["show", summary["run_id"], "--include-text"]) == 0
    shown = json.loads(capsys.readouterr().out)
    texts = {cand["chunk_id"]: cand["content"] for c in shown["cases"] for cand in c["candidates"]}
    assert texts[chunks["coffee.md"]].startswith("The office coffee machine")
    jsonschema.validate(shown, REPORT_SCHEMA)
    assert main(["runs", "--knowledge-base", KB, "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert summary["run_id"] in [r["run_id"] for r in listed]


@pytest.mark.parametrize("argv, message", [
    (["--strategy", "no-such-v9"], "unknown strategy version 'no-such-v9'"),
    (["--strategy", "hybird-v1"], "unknown strategy version 'hybird-v1'; did you mean 'hybrid-v1'?"),
    (["--knowledge-base", "no-such-kb"], "names knowledge base 'eval-tiny' but 'no-such-kb' was requested"),
    (["--knowledge-base-id", "00000000-0000-0000-0000-000000000000"], "unknown knowledge base"),
])
def test_cli_errors_are_one_clear_line(engine, tiny, capsys, argv, message):
    from rag_pipeline.cli import main

    _, path = tiny
    assert main(["evaluate", "--dataset", str(path), "--quiet", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rag-pipeline: error: ") and message in err[0]


def test_results_do_not_depend_on_the_number_of_readers(engine, tiny):
    """Batches searched by 1 or 3 parallel snapshot readers: the same stored pools, case order, reasons
    and averages (the main thread consumes the batches in order whatever finishes first)."""
    _, path = tiny
    dataset = load_dataset(path)
    strategy = get_strategy("hybrid-v1")
    outcomes = [evaluate_dataset(engine, dataset, strategy, batch_size=1, readers=n) for n in (1, 3)]

    def stored(run_id):
        with engine.connect() as conn:
            cands = conn.execute(sa.text(
                "SELECT case_id, rank, chunk_id, vector_rank, keyword_rank, is_relevant, is_selected, "
                "round(CAST(final_score AS numeric), 6) FROM retrieval_evaluation_candidates "
                "WHERE evaluation_run_id = :r ORDER BY case_id, rank"), {"r": run_id}).all()
            cases = conn.execute(sa.text(
                "SELECT case_index, case_id, retrieved_chunk_ids, miss_reasons IS NOT NULL "
                "FROM retrieval_evaluation_case_results WHERE evaluation_run_id = :r ORDER BY case_index"),
                {"r": run_id}).all()
        return cands, cases

    one, three = (stored(o.run_id) for o in outcomes)
    assert one == three and len(one[1]) == len(dataset.cases)
    assert [c.case_id for c in one[1]] == [c.case_id for c in dataset.cases]
    assert outcomes[0].averages == pytest.approx(outcomes[1].averages, abs=1e-9)
    assert [o.summary.readers for o in outcomes] == [1, 3]
    assert outcomes[0].summary.miss_reasons == outcomes[1].summary.miss_reasons
