"""Concurrency on a real PostgreSQL: two partitions of the evaluation assets materialised at the same
time by two ``dagster job execute`` processes, two runs of one partition racing
for ``is_current``, and a knowledge base re-ingested while an evaluation reads it (REPEATABLE READ).

Overlap is forced, not hoped for: a SHARE lock on ``retrieval_evaluation_case_results`` holds every run
at its first write until all of them are there, however slow the machine is."""

import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from rag_pipeline.defs.instance import ensure_pool
from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.evaluation.runs import lifecycle as run_records
from rag_pipeline.knowledge_base.ingestion import ingest_documents
from rag_pipeline.knowledge_base.sources import read_folder
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline.storage.engine import dagster_database_url, database_url, get_engine
from rag_pipeline_tests.eval_helpers import TINY_DOCS, ingest_tiny_kb, run_rows, tiny_cases, write_dataset
from rag_pipeline_tests.reliability_helpers import (
    admin,
    assert_no_partial_succeeded_runs,
    blocked_writes,
    tagged_engine,
    wait_until,
    waiting_on,
)

ROOT = Path(__file__).resolve().parents[2]
KB = "concurrency-tiny"
LOCKED = "retrieval_evaluation_case_results"


def _pool(engine, run_id) -> set[tuple]:
    """A run's candidate pools as (case_id, chunk_id, rank, strategy_version, final score to 1e-9)."""
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT case_id, chunk_id::text, rank, strategy_version, final_score "
            "FROM retrieval_evaluation_candidates WHERE evaluation_run_id = :r"), {"r": run_id}).all()
    return {(r.case_id, r.chunk_id, r.rank, r.strategy_version, round(r.final_score, 9)) for r in rows}


def _errors(output: str) -> str:
    """The lines of a ``dagster job execute`` output worth reading when it failed (not the DEBUG events)."""
    lines = [line for line in output.splitlines() if " - DEBUG - " not in line and "warn" not in line.lower()]
    return "\n".join(lines)[-6000:]


@pytest.mark.slow  # two Dagster processes
def test_two_partitions_materialised_concurrently_by_two_processes(engine, chunks, tmp_path, monkeypatch):
    name = f"conc-{uuid.uuid4().hex[:6]}"
    versions = ("keyword-v1", "bm25-v1")
    folder = tmp_path / "datasets"
    path = write_dataset(folder / f"{name}.json", KB, tiny_cases(chunks), name=name)
    monkeypatch.setenv("RAG_DATASETS_DIR", str(folder))
    dataset = load_dataset(path)
    expected = {v: evaluate_dataset(engine, dataset, get_strategy(v), batch_size=2) for v in versions}

    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")  # Postgres run/event storage, pools
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("RAG_DAGSTER_PG_URL", dagster_database_url())
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("dataset", [name])
        ensure_pool(instance)  # what `make run` / `rag-pipeline db start` do on a new instance
    run_config = home / "run_config.json"
    run_config.write_text(json.dumps({  # the job runs its two steps in its own process (in-process executor)
        "ops": {"evaluation_run": {"config": {"batch_size": 2}}},
    }), encoding="utf-8")
    apps = {v: f"rag-test-conc-{v}-{uuid.uuid4().hex[:6]}" for v in versions}
    dagster = Path(sys.executable).with_name("dagster")
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    procs = {}
    with blocked_writes(LOCKED) as lock, admin() as conn:
        for v in versions:
            env = {**os.environ, "PYTHONPATH": pythonpath, "PGAPPNAME": apps[v]}
            procs[v] = subprocess.Popen(
                [str(dagster), "job", "execute", "-m", "rag_pipeline.definitions", "-j", "evaluate_retrieval",
                 "-c", str(run_config), "--tags", json.dumps({"dagster/partition": f"{name}|{v}"})],
                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def both_mid_write() -> bool:
            exited = [v for v, p in procs.items() if p.poll() is not None]
            assert not exited, f"{exited} ended before writing:\n{_errors(procs[exited[0]].stdout.read())}"
            return {r.application_name for r in waiting_on(conn, lock)} >= set(apps.values())

        try:
            wait_until(both_mid_write, timeout=300, interval=0.2, what="both partitions to be mid-write at once")
        except BaseException:
            for p in procs.values():
                p.kill()
            raise
    outputs = {v: p.communicate(timeout=300)[0] for v, p in procs.items()}  # the barrier is released
    for v, p in procs.items():
        assert p.returncode == 0, _errors(outputs[v])

    with engine.connect() as conn:
        rows = {v: run_records.list_runs(conn, dataset=name, strategy=v) for v in versions}
        versions_of_dataset = conn.execute(sa.text(
            "SELECT count(*) FROM retrieval_evaluation_datasets WHERE name = :n"), {"n": name}).scalar_one()
    assert versions_of_dataset == 1, "both partitions stored the same dataset version once"
    dagster_runs = set()
    for v in versions:
        new, old = rows[v]
        assert str(old.id) == expected[v].run_id and not old.is_current
        assert (new.status, new.is_current, new.partition_key) == ("succeeded", True, f"{name}|{v}")
        assert new.strategy_version == v and new.dataset_id == old.dataset_id
        assert run_rows(engine, new.id) == (new.candidate_count, 5) == (expected[v].candidate_count, 5)
        pool = _pool(engine, new.id)
        assert {p[3] for p in pool} == {v}, "no candidate of the other partition"
        assert pool == _pool(engine, expected[v].run_id), "the same pools as a run on its own"
        dagster_runs.add(new.dagster_run_id)
    assert len(dagster_runs) == 2
    with dg.DagsterInstance.get() as instance:
        for run_id in dagster_runs:
            assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.SUCCESS
    assert_no_partial_succeeded_runs(engine)


def test_two_runs_of_one_partition_at_once_leave_exactly_one_current(engine, chunks, tmp_path):
    path = write_dataset(tmp_path / "ds.json", KB, tiny_cases(chunks), name="conc-same")
    dataset, strategy = load_dataset(path), get_strategy("keyword-v1")
    tagged = [tagged_engine(f"same-{i}") for i in range(2)]
    outcomes, errors = {}, []

    def work(i: int) -> None:
        try:
            outcomes[i] = evaluate_dataset(tagged[i][0], dataset, strategy, batch_size=2)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    try:
        with blocked_writes(LOCKED) as lock, admin() as conn:
            for t in threads:
                t.start()
            wait_until(lambda: errors or {r.application_name for r in waiting_on(conn, lock)}
                       >= {name for _, name in tagged}, timeout=120, what="both runs to be mid-write")
        for t in threads:
            t.join(timeout=120)
    finally:
        for e, _ in tagged:
            e.dispose()
    assert not errors, errors
    with engine.connect() as conn:
        history = run_records.list_runs(conn, dataset="conc-same", strategy="keyword-v1")
    assert {str(r.id) for r in history} == {o.run_id for o in outcomes.values()}
    assert all(r.status == "succeeded" for r in history)
    assert sum(r.is_current for r in history) == 1
    assert_no_partial_succeeded_runs(engine)


def _current_chunks(engine, kb: str) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(sa.text(
            "SELECT c.id::text FROM document_chunks c JOIN knowledge_bases kb ON kb.id = c.knowledge_base_id "
            "WHERE kb.name = :n AND c.is_current"), {"n": kb}).scalars())


@pytest.mark.parametrize("version", ["hybrid-v1", "bm25-v1"])
def test_reingesting_while_an_evaluation_reads_it_keeps_one_snapshot(engine, tmp_path, version):
    """The knowledge base is re-ingested with every document changed (new chunk ids, new BM25 statistics)
    after the evaluation's first batch. Every later batch still sees the old version: the run's pools are
    exactly those of a run before the change; a run afterwards sees only the new chunks."""
    kb = f"conc-reingest-{version}-{uuid.uuid4().hex[:6]}"
    docs = tmp_path / "docs"
    v1 = ingest_tiny_kb(engine, kb, docs)
    path = write_dataset(tmp_path / "ds.json", kb, tiny_cases(v1), name=kb)
    dataset, strategy = load_dataset(path), get_strategy(version)
    before = evaluate_dataset(engine, dataset, strategy, batch_size=1)
    old = _current_chunks(engine, kb)
    assert old == set(v1.values())
    for doc in TINY_DOCS:  # every document changes; every question's words now appear in every document
        with (docs / doc).open("a", encoding="utf-8") as fp:
            fp.write("Also: basebackup archiving, one repository for all services, a new hire's first week, "
                     "the coffee machine. 年假\n")
    # a lock wait would be a bug (the reader must not block the writer): fail instead of hanging
    url = make_url(database_url()).update_query_dict({"options": "-c lock_timeout=30000"})
    ingest_engine = get_engine(url.render_as_string(hide_password=False), migrate=False)
    seen = {}

    def progress(done: int, _total: int) -> None:
        if done == 1:
            result = ingest_documents(ingest_engine, read_folder(docs), kb, text_search="simple", chunk_size=500,
                                      chunk_overlap=80)
            seen["result"] = result
            seen["new"] = _current_chunks(engine, kb)  # committed: visible to every new transaction

    try:
        during = evaluate_dataset(engine, dataset, strategy, batch_size=1, progress=progress)
    finally:
        ingest_engine.dispose()
    assert seen["result"].documents_changed == len(TINY_DOCS)
    new = seen["new"]
    assert len(new) == len(TINY_DOCS) and new.isdisjoint(old)
    pool = _pool(engine, during.run_id)
    assert {p[1] for p in pool} <= old, "no batch saw a chunk of the new version"
    assert pool == _pool(engine, before.run_id), "the whole run saw the knowledge base as it was at its start"
    after = evaluate_dataset(engine, dataset, strategy, batch_size=1)
    assert {p[1] for p in _pool(engine, after.run_id)} <= new
    assert_no_partial_succeeded_runs(engine)
