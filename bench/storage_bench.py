"""Candidate storage at scale: bytes per candidate row and the cost of removing one run, before/after migration 0004.

Baseline ("before"): the 0003 table ``retrieval_evaluation_candidates`` (one heap, bigserial id, every seed field
stored per row incl. ``case_id``, ``document_id``, ``document_name``, ``strategy_version``; indexes: primary key
and ``(evaluation_run_id, case_id, rank)``), recreated here as ``bench_candidates_0003``; removing a run is a
``DELETE`` of its rows. After: the product's ``retrieval_evaluation_candidate_rows`` (one partition per run, slim
row) and :func:`rag_pipeline.service.retention.prune_runs` (drops the partition).

At each total size (``--sizes``, candidate rows spread over ``--runs`` runs, 200-candidate pools, realistic SciFact
strings) it fills both layouts with ``generate_series`` in SQL, prints bytes/row (table + indexes) and the time
to remove the oldest run, and the ratios after/before. Everything it creates is removed at the end.

    RAG_PGDATA=/tmp/rag-bench python bench/storage_bench.py --sizes 1000000,10000000 [--baseline-max 1000000]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchutil import machine_line

from rag_pipeline.service import retention
from rag_pipeline.storage.engine import get_engine

POOL = 200
OLD_TABLE = "bench_candidates_0003"
OLD_DDL = f"""
CREATE TABLE {OLD_TABLE} (
    id bigserial PRIMARY KEY, evaluation_run_id uuid NOT NULL, case_id text NOT NULL, chunk_id uuid NOT NULL,
    document_id uuid NOT NULL, document_name text NOT NULL, rank integer NOT NULL, vector_score double precision,
    vector_rank integer, keyword_score double precision, keyword_rank integer, rerank_score double precision,
    final_score double precision NOT NULL, is_relevant boolean NOT NULL, is_selected boolean NOT NULL,
    strategy_version varchar(100) NOT NULL, relevance_grade smallint);
CREATE INDEX ix_{OLD_TABLE}_run_case ON {OLD_TABLE} (evaluation_run_id, case_id, rank);
"""
# i = 0 .. n-1 within a run: case i / POOL, rank i % POOL + 1 (SciFact-like ids and names)
OLD_FILL = f"""
INSERT INTO {OLD_TABLE} (evaluation_run_id, case_id, chunk_id, document_id, document_name, rank, vector_score,
    vector_rank, keyword_score, keyword_rank, rerank_score, final_score, is_relevant, is_selected, strategy_version,
    relevance_grade)
SELECT CAST(:run AS uuid), 'scifact-' || (i / {POOL}), gen_random_uuid(), gen_random_uuid(),
       'corpus.jsonl#' || (4000000 + i % 5183), i % {POOL} + 1,
       CASE WHEN i % 2 = 0 THEN random() END, CASE WHEN i % 2 = 0 THEN i % 100 + 1 END,
       CASE WHEN i % 3 > 0 THEN random() * 20 END, CASE WHEN i % 3 > 0 THEN i % 100 + 1 END, NULL, random(),
       i % 97 = 0, i % {POOL} < 10, 'hybrid-bm25-v1', CASE WHEN i % 97 = 0 THEN 1 END
FROM generate_series(0, :n - 1) AS i
"""
NEW_FILL = f"""
INSERT INTO retrieval_evaluation_candidate_rows (evaluation_run_id, case_index, chunk_id, rank, vector_score,
    vector_rank, keyword_score, keyword_rank, rerank_score, final_score, is_selected, relevance_grade)
SELECT CAST(:run AS uuid), i / {POOL}, gen_random_uuid(), i % {POOL} + 1,
       CASE WHEN i % 2 = 0 THEN random() END, CASE WHEN i % 2 = 0 THEN i % 100 + 1 END,
       CASE WHEN i % 3 > 0 THEN random() * 20 END, CASE WHEN i % 3 > 0 THEN i % 100 + 1 END, NULL, random(),
       i % {POOL} < 10, CASE WHEN i % 97 = 0 THEN 1 END
FROM generate_series(0, :n - 1) AS i
"""


def _scaffold(conn: sa.Connection, tag: str) -> tuple[uuid.UUID, uuid.UUID]:
    kb, ds = uuid.uuid4(), uuid.uuid4()
    conn.execute(sa.text("INSERT INTO knowledge_bases (id, name, text_search, chunk_size, chunk_overlap, chunk_count, "
                         "avg_chunk_length) VALUES (:id, :n, 'simple', 0, 0, 0, 0)"), {"id": kb, "n": f"bench-{tag}"})
    conn.execute(sa.text("INSERT INTO retrieval_evaluation_datasets (id, name, knowledge_base_name, content_hash, "
                         "case_count, cases) VALUES (:id, :n, :n, 'h', 0, '[]')"), {"id": ds, "n": f"bench-{tag}"})
    return kb, ds


def new_layout(engine: sa.Engine, total: int, runs: int) -> dict:
    tag = uuid.uuid4().hex[:8]
    per_run = total // runs
    with engine.begin() as conn:
        kb, ds = _scaffold(conn, tag)
    run_ids = []
    t = time.perf_counter()
    for i in range(runs):
        run = uuid.uuid4()
        run_ids.append(run)
        with engine.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO retrieval_evaluation_runs (id, dataset_id, knowledge_base_id, strategy_version, "
                "params_hash, strategy_params, status, is_current, case_count, candidate_count, started_at) VALUES "
                "(:id, :ds, :kb, 'hybrid-bm25-v1', 'h', '{}', 'succeeded', false, :cases, :n, "
                "now() - make_interval(days => :age))"),
                {"id": run, "ds": ds, "kb": kb, "cases": per_run // POOL, "n": per_run, "age": runs - i})
            conn.execute(sa.text("SELECT rag_candidate_partition(:id)"), {"id": run})
            conn.execute(sa.text(NEW_FILL), {"run": str(run), "n": per_run})
    fill_s = time.perf_counter() - t
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE retrieval_evaluation_candidate_rows"))
        size = conn.execute(sa.text(
            "SELECT sum(pg_total_relation_size(to_regclass(quote_ident(rag_candidate_partition_name(r))))) "
            "FROM unnest(CAST(:ids AS uuid[])) AS r"), {"ids": [str(r) for r in run_ids]}).scalar_one()
    t = time.perf_counter()
    pruned = retention.prune_runs(engine, keep_last=runs - 1, dataset=f"bench-{tag}")
    prune_s = time.perf_counter() - t
    assert [p.run_id for p in pruned.runs] == [str(run_ids[0])], pruned
    with engine.begin() as conn:  # clean up: the rest of the runs (partitions dropped by the trigger)
        conn.execute(sa.text("DELETE FROM knowledge_bases WHERE id = :kb"), {"kb": kb})
        conn.execute(sa.text("DELETE FROM retrieval_evaluation_datasets WHERE id = :ds"), {"ds": ds})
    return {"bytes_per_row": int(size) / (per_run * runs), "prune_s": prune_s, "fill_s": fill_s,
            "pruned_rows": pruned.candidate_rows, "freed": pruned.bytes_freed}


def old_layout(engine: sa.Engine, total: int, runs: int) -> dict:
    per_run = total // runs
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS {OLD_TABLE}"))
        for stmt in OLD_DDL.strip().split(";"):
            if stmt.strip():
                conn.execute(sa.text(stmt))
    run_ids = [uuid.uuid4() for _ in range(runs)]
    t = time.perf_counter()
    for run in run_ids:
        with engine.begin() as conn:
            conn.execute(sa.text(OLD_FILL), {"run": str(run), "n": per_run})
    fill_s = time.perf_counter() - t
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text(f"VACUUM ANALYZE {OLD_TABLE}"))
        size = conn.execute(sa.text(f"SELECT pg_total_relation_size('{OLD_TABLE}')")).scalar_one()
    t = time.perf_counter()
    with engine.begin() as conn:
        deleted = conn.execute(sa.text(f"DELETE FROM {OLD_TABLE} WHERE evaluation_run_id = :r"),
                               {"r": run_ids[0]}).rowcount
    delete_s = time.perf_counter() - t
    assert deleted == per_run
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE {OLD_TABLE}"))
    return {"bytes_per_row": size / (per_run * runs), "prune_s": delete_s, "fill_s": fill_s}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="100000,1000000", help="total candidate rows, comma-separated")
    p.add_argument("--runs", type=int, default=10, help="runs the rows are spread over (the oldest is removed)")
    p.add_argument("--baseline-max", type=int, default=1_000_000,
                   help="largest size the 0003 baseline is built at (it is slow to fill)")
    args = p.parse_args(argv)
    engine = get_engine()
    print(machine_line())
    print("| candidate rows (runs × rows) | before: bytes/row | after: bytes/row | after/before | "
          "before: DELETE one run | after: prune one run | after/before |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for total in (int(s) for s in args.sizes.split(",")):
        new = new_layout(engine, total, args.runs)
        old = old_layout(engine, total, args.runs) if total <= args.baseline_max else None
        per = f"{args.runs} × {total // args.runs:,}"
        if old:
            print(f"| {total:,} ({per}) | {old['bytes_per_row']:.0f} | {new['bytes_per_row']:.0f} | "
                  f"{new['bytes_per_row'] / old['bytes_per_row']:.2f} | {old['prune_s']:.2f} s | "
                  f"{new['prune_s']:.3f} s | {new['prune_s'] / old['prune_s']:.3f} |", flush=True)
        else:
            print(f"| {total:,} ({per}) | (not built) | {new['bytes_per_row']:.0f} | | | {new['prune_s']:.3f} s | |",
                  flush=True)
        print(f"  fill: after {new['fill_s']:.1f} s" + (f", before {old['fill_s']:.1f} s" if old else "")
              + f"; prune removed {new['pruned_rows']:,} rows, {new['freed'] / 2**20:.1f} MiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
