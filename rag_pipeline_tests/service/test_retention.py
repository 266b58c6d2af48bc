"""Retention (``runs prune``): what it keeps (current, running, compared, the newest N), what it removes (the run, its
candidate partition, its case results) and what it reports; the CLI and the off-by-default Dagster schedule."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from rag_pipeline.cli import main
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.evaluation.runs.queries import replace_comparison_runs
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline.service import retention
from rag_pipeline.storage.evaluation_tables import CANDIDATE_PARTITION_PREFIX
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, run_rows, tiny_cases, write_dataset


def _partition_exists(engine: sa.Engine, run_id: str) -> bool:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT to_regclass(:n) IS NOT NULL"),
                            {"n": CANDIDATE_PARTITION_PREFIX + run_id.replace("-", "")}).scalar_one()


def test_prune_keeps_current_running_and_compared_runs(engine, kb_name, tmp_path, capsys):
    chunks = ingest_tiny_kb(engine, kb_name, tmp_path / "docs")
    name = f"prune-{kb_name}"
    dataset = load_dataset(write_dataset(tmp_path / "d.json", kb_name, tiny_cases(chunks), name=name))
    hybrid, keyword = get_strategy("hybrid-v1"), get_strategy("keyword-v1")
    old = [evaluate_dataset(engine, dataset, hybrid).run_id for _ in range(3)]  # oldest first; old[2] is current
    only_keyword = evaluate_dataset(engine, dataset, keyword).run_id  # current of its strategy: never removed
    with engine.connect() as conn:
        kb_id = conn.execute(sa.text("SELECT knowledge_base_id FROM retrieval_evaluation_runs WHERE id = :r"),
                             {"r": old[0]}).scalar_one()
        dataset_id = conn.execute(sa.text("SELECT dataset_id FROM retrieval_evaluation_runs WHERE id = :r"),
                                  {"r": old[0]}).scalar_one()
    in_progress = run_records.create_run(engine, dataset_id=dataset_id, knowledge_base_id=kb_id, strategy=hybrid,
                                  params_hash=hybrid.params_hash())  # running, fresh heartbeat: never removed
    with engine.begin() as conn:
        replace_comparison_runs(conn, f"{name}|{kb_name}", [old[1], only_keyword])
    rows_0 = run_rows(engine, old[0])
    assert rows_0[0] > 0 and _partition_exists(engine, old[0])

    dry = retention.prune_runs(engine, keep_last=0, dataset=name, dry_run=True)
    assert [r.run_id for r in dry.runs] == [old[0]]
    assert dry.kept_for_comparison == 1 and dry.candidate_rows == rows_0[0] and dry.bytes_freed > 8192
    assert run_rows(engine, old[0]) == rows_0, "a dry run removes nothing"

    assert main(["runs", "prune", "--keep-last", "0", "--dataset", name]) == 0
    out = capsys.readouterr().out
    assert f"removed {old[0][:8]}" in out and f"removed 1 run(s), {rows_0[0]} candidate rows" in out
    assert "kept 1 old run(s) that a stored comparison refers to" in out
    assert run_rows(engine, old[0]) == (0, 0) and not _partition_exists(engine, old[0])
    with engine.connect() as conn:
        left = set(conn.execute(sa.text(
            "SELECT r.id::text FROM retrieval_evaluation_runs r JOIN retrieval_evaluation_datasets d "
            "ON d.id = r.dataset_id WHERE d.name = :n"), {"n": name}).scalars())
    assert left == {old[1], old[2], only_keyword, str(in_progress)}

    again = retention.prune_runs(engine, keep_last=0, dataset=name, include_compared=True)
    assert [r.run_id for r in again.runs] == [old[1]], "only the compared one goes; current and running stay"
    assert run_rows(engine, old[2])[0] > 0 and run_rows(engine, only_keyword)[0] > 0
    assert retention.prune_runs(engine, keep_last=0, dataset=name, include_compared=True).runs == []


def test_prune_keep_last_and_older_than(engine, kb_name, tmp_path):
    chunks = ingest_tiny_kb(engine, kb_name, tmp_path / "docs")
    name = f"keep-{kb_name}"
    dataset = load_dataset(write_dataset(tmp_path / "d.json", kb_name, tiny_cases(chunks)[:2], name=name))
    ids = [evaluate_dataset(engine, dataset, get_strategy("keyword-v1")).run_id for _ in range(4)]
    assert retention.prune_runs(engine, keep_last=2, dataset=name, older_than_days=1).runs == [], "all are new"
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE retrieval_evaluation_runs SET started_at = started_at - interval '3 days' "
                             "WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": ids[:3]})
    pruned = retention.prune_runs(engine, keep_last=2, dataset=name, older_than_days=2)
    assert [r.run_id for r in pruned.runs] == ids[:2], "the 2 newest stay (ids[2] is old but among them)"


def test_bad_retention_arguments_are_user_errors(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["runs", "prune", "--keep-last", "-1"])
    assert exit_info.value.code == 2
    assert "argument --keep-last: expected an integer between 0 and 1000000, got -1" in capsys.readouterr().err


def test_the_prune_schedule_is_off_by_default():
    import dagster as dg

    from rag_pipeline.defs.schedules import nightly_prune

    assert nightly_prune.default_status == dg.DefaultScheduleStatus.STOPPED
    assert nightly_prune.job_name == "prune_evaluation_runs"
