"""One click of several strategies through the pipeline, with each run's time per stage (``summary.stages``).

A click is what the CLI's ``evaluate --strategy A --strategy B ...`` and a console click run: the strategies one
after the other in one process (``service.evaluate``), sharing the loaded indexes and question vectors. Each click
runs in a fresh child process (as a Dagster run does), ``--repeat`` times; the parent prints per stage the sum
over the click's runs (median over the clicks), the click's wall time, and a digest of every run's stored
results (candidates with every score, case results with metrics and miss reasons), so two versions of the code
can be shown to store the same results.

Knowledge bases: ``--kb demo`` (``demo/kb`` ingested as the tests do, ``datasets/demo.json``) or ``--chunks N
--cases M`` (the SYNTHETIC KB and dataset of ``bench/synthetic.py``, made by ``eval_bench.generate``).
Usage: RAG_PGDATA=<scratch> python bench/click_bench.py --kb demo [--repeat 3] [--json-out out.json]
       RAG_PGDATA=<scratch> python bench/click_bench.py --chunks 20000 --cases 1000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchutil import machine_line, postgres_cpu_seconds  # noqa: E402

STRATEGIES = ("hybrid-v1", "vector-v1", "keyword-v1", "bm25-v1", "hybrid-bm25-v1", "rrf-v1", "vector-exact-v1",
              "hybrid-bm25-exact-v1")
"""The shipped strategies of one model (USE), the one model the demo and synthetic KBs are ingested with."""

DIGEST_SQL = """
SELECT md5(coalesce((SELECT string_agg(concat_ws('|', case_index, chunk_id, rank, vector_score, vector_rank,
                                                 keyword_score, keyword_rank, rerank_score, final_score, is_selected,
                                                 relevance_grade), ';' ORDER BY case_index, rank)
                     FROM retrieval_evaluation_candidate_rows WHERE evaluation_run_id = :r), '')) AS candidates,
       md5(coalesce((SELECT string_agg(concat_ws('|', case_id, case_index, retrieved_chunk_ids::text,
                                                 first_relevant_rank, precision_at_k, recall_at_k, reciprocal_rank,
                                                 ndcg_at_k, hit_at_k, average_precision_at_k, r_precision,
                                                 miss_reasons::text), ';' ORDER BY case_index)
                     FROM retrieval_evaluation_case_results WHERE evaluation_run_id = :r), '')) AS cases
"""


def demo_dataset(engine) -> Path:
    """The demo KB (ingested once, as ``rag_pipeline_tests.conftest.ingest_demo_kb`` does) and its dataset."""
    import sqlalchemy as sa

    from rag_pipeline.evaluation.datasets import demo
    from rag_pipeline.knowledge_base.ingestion import ingest_documents
    from rag_pipeline.knowledge_base.sources import read_folder

    with engine.connect() as conn:
        present = conn.execute(sa.text("SELECT 1 FROM knowledge_bases WHERE name = :n"), {"n": demo.DEMO_KB}).first()
    if not present:
        ingest_documents(engine, read_folder(ROOT / "demo" / "kb"), demo.DEMO_KB, text_search=demo.DEMO_TEXT_SEARCH,
                         chunk_size=demo.DEMO_CHUNK_SIZE, chunk_overlap=demo.DEMO_CHUNK_OVERLAP)
    return ROOT / "datasets" / "demo.json"


def child(dataset: Path, strategies: list[str]) -> int:
    """One click in this process: prints one JSON line (wall, runs with their stages and digests)."""
    import sqlalchemy as sa

    from rag_pipeline.service import evaluations
    from rag_pipeline.storage.engine import get_engine

    engine = get_engine()
    server = _server_cpu()
    t, cpu, pg = time.perf_counter(), time.process_time(), server()
    plan = evaluations.plan_evaluation(engine, dataset, strategies)
    outcomes = evaluations.evaluate(engine, plan)
    wall = time.perf_counter() - t
    cpu, pg = time.process_time() - cpu, (server() - pg if pg is not None else None)
    runs = []
    with engine.connect() as conn:
        for o in outcomes:
            digest = conn.execute(sa.text(DIGEST_SQL), {"r": o.run_id}).one()
            runs.append({"strategy": o.strategy_version, "run_id": o.run_id, "cases": o.case_count,
                         "candidates": o.candidate_count, "stages": o.stages.model_dump() if o.stages else None,
                         "digest": f"{digest.candidates[:12]}/{digest.cases[:12]}"})
    print(json.dumps({"wall_s": wall, "process_cpu_s": cpu, "postgres_cpu_s": pg, "runs": runs}))
    return 0


def _server_cpu():
    """A function giving the CPU seconds of the embedded PostgreSQL server so far (postmaster, live backends and the
    backends it has reaped); None throughout for a server that is not this machine's embedded one (not measured)."""
    import psutil

    from rag_pipeline.settings import pgdata_dir

    try:
        postmaster = psutil.Process(int((Path(pgdata_dir()) / "postmaster.pid").read_text().split()[0]))
    except (OSError, ValueError, psutil.Error):
        return lambda: None

    return lambda: postgres_cpu_seconds(postmaster)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", choices=["demo"], help="the demo KB and datasets/demo.json")
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dataset", type=Path, help="an existing dataset file (skips making the KB)")
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    strategies = args.strategies.split(",")
    if args.child:
        return child(args.child, strategies)

    from rag_pipeline.storage.engine import get_engine

    print(machine_line())
    if args.dataset:
        dataset = args.dataset
    elif args.kb == "demo":
        dataset = demo_dataset(get_engine())
    else:
        from eval_bench import generate

        args.text_only = args.model_vectors = False
        dataset = generate(args)
    print(f"dataset: {dataset}; strategies: {', '.join(strategies)}")
    clicks = []
    for i in range(args.repeat):
        proc = subprocess.run([sys.executable, __file__, "--child", str(dataset), "--strategies", args.strategies],
                              capture_output=True, text=True, env=os.environ)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
            raise SystemExit(f"click {i + 1} failed (exit {proc.returncode})")
        clicks.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        c = clicks[-1]
        server = "n/a (not this machine's embedded server)" if c["postgres_cpu_s"] is None else \
            f"{c['postgres_cpu_s']:.2f}"
        print(f"click {i + 1}: {c['wall_s']:.2f} s, CPU s: this process {c['process_cpu_s']:.2f}, PostgreSQL "
              f"{server}; load {os.getloadavg()[0]:.1f}")
    keys = [k for k in clicks[0]["runs"][0]["stages"] if k != "wall_s"] + ["wall_s"]
    summed = {k: statistics.median(sum(r["stages"][k] for r in c["runs"]) for c in clicks) for k in keys}
    print(f"\nper stage, summed over the click's {len(strategies)} runs (median of {len(clicks)} clicks):")
    for k in keys:
        print(f"  {k:<22} {summed[k]:8.3f} s")
    wall = statistics.median(c["wall_s"] for c in clicks)
    each = ", ".join(f"{c['wall_s']:.2f}" for c in clicks)
    print(f"click wall (plan + runs): {wall:.2f} s (median; each: {each})")
    digests = {r["strategy"]: r["digest"] for r in clicks[0]["runs"]}
    same = all({r["strategy"]: r["digest"] for r in c["runs"]} == digests for c in clicks)
    print(f"results digest (candidates/cases), equal in every click: {same}")
    for s, d in digests.items():
        print(f"  {s:<22} {d}")
    print(f"load at end: {os.getloadavg()[0]:.1f}")
    if args.json_out:
        args.json_out.write_text(json.dumps({"clicks": clicks, "summed": summed, "wall_s": wall,
                                             "digests": digests}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
