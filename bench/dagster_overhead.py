"""Where the time of a one-click evaluation goes: from ``POST …/retrieval/evaluate`` (what the HTTP API and the
console call: the run rows queued, which the daemon's ``queued_evaluations`` sensor turns into a Dagster run) to
every run row settled, through a real ``dagster-daemon`` (sensor → queue → run launcher → run worker) on a
temporary DAGSTER_HOME.

Two launch paths, measured in the same run on the same knowledge base, dataset and strategies:

- ``per-strategy`` (the baseline): one ``dagster job launch -j evaluate_retrieval`` subprocess per strategy, one
  Dagster run (one run worker, one code load, one model load) each — what the API did before;
- ``launcher``: what the API does now (one ``evaluate_strategies`` run per click, requested by the sensor).

Per path: click → settled wall seconds, and per Dagster run the phases read back from its event log (submitted →
dequeued by the daemon → run worker started with the code loaded → steps → run end) plus the evaluation's own
timings (``embedding_s`` includes the model load of a fresh process; SQL; persistence). Starts a fresh embedded
PostgreSQL in a temporary folder and ingests the demo knowledge base into it::

    python bench/dagster_overhead.py --cases 10 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TERMINAL = {"succeeded", "failed", "abandoned"}  # every RunStatus that ends (contracts/runs.py)
PHASES = ("RUN_ENQUEUED", "RUN_DEQUEUED", "RUN_STARTING", "RUN_START", "STEP_START", "STEP_SUCCESS", "RUN_SUCCESS")


def _launch_per_strategy(launcher, engine, kb: str, dataset_id: str, strategies: list[str]) -> list:
    """The baseline path: queue the rows, then one ``dagster job launch`` subprocess per strategy."""
    from rag_pipeline.service.queued_runs import queue_evaluations

    os.environ["RAG_EVALUATION_QUEUE"] = "per-strategy-baseline"  # launched below, not by the daemon's sensor
    try:
        queued = queue_evaluations(engine, kb, dataset_id, strategies, one_dagster_run=False)
    finally:
        os.environ.pop("RAG_EVALUATION_QUEUE")
    instance, name = launcher.instance(), queued.runs[0].dataset
    if not instance.has_dynamic_partition("dataset", name):  # what the launcher does before it submits
        instance.add_dynamic_partitions("dataset", [name])
    env = {**launcher.environment(), "PYTHONWARNINGS": "ignore::FutureWarning"}
    for run in queued.runs:
        config = {"ops": {"evaluation_dataset": {"config": {"dataset_id": run.dataset_id}},
                          "evaluation_run": {"config": {"evaluation_run_id": run.run_id}}}}
        tags = {"dagster/partition": run.partition_key, "rag/evaluation_run_id": run.run_id}
        subprocess.run([str(Path(sys.executable).with_name("dagster")), "job", "launch", "-m",
                        "rag_pipeline.definitions", "-j", "evaluate_retrieval", "--run-id", run.dagster_run_id,
                        "--tags", json.dumps(tags), "--config-json", json.dumps(config)],
                       cwd=env["DAGSTER_HOME"], env=env, capture_output=True, check=True, timeout=600)
    return queued.runs


def _launch_shipped(launcher, engine, kb: str, dataset_id: str, strategies: list[str]) -> list:
    return launcher.launch_evaluations(engine, kb, dataset_id, strategies).runs


PATHS = {"per-strategy": _launch_per_strategy, "launcher": _launch_shipped}


def _settle(engine, runs, timeout: float = 900) -> list:
    from rag_pipeline.service.evaluations import run_summaries

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        summaries = run_summaries(engine, [r.run_id for r in runs])
        if all(s.status in TERMINAL for s in summaries):
            return summaries
        time.sleep(0.2)
    raise SystemExit(f"runs not settled after {timeout} s")


def _phases(instance, dagster_run_id: str) -> dict[str, float]:
    """Seconds from the run's creation to the first event of each phase (the last STEP_SUCCESS)."""
    first: dict[str, float] = {}
    for entry in instance.all_logs(dagster_run_id):
        name = entry.dagster_event.event_type.name if entry.dagster_event else None
        if name in PHASES and (name not in first or name == "STEP_SUCCESS"):
            first[name] = entry.timestamp
    start = first.get("RUN_ENQUEUED", min(first.values(), default=0.0))
    return {name: round(first[name] - start, 2) for name in PHASES if name in first}


def _measure(path: str, launcher, engine, kb: str, dataset_id: str, strategies: list[str]) -> dict:
    start = time.perf_counter()
    runs = PATHS[path](launcher, engine, kb, dataset_id, strategies)
    submitted = time.perf_counter() - start
    summaries = _settle(engine, runs)
    settled = time.perf_counter() - start
    failed = [f"{s.strategy_version}: {s.error}" for s in summaries if s.status != "succeeded"]
    if failed:
        raise SystemExit(f"{path}: runs failed: {failed}")
    instance = launcher.instance()
    phases = {d: _phases(instance, d) for d in dict.fromkeys(s.dagster_run_id for s in summaries)}
    timing = {k: round(statistics.fmean((s.timings or {}).get(k, 0.0) for s in summaries), 3)
              for k in ("embedding_s", "retrieval_sql_s", "diagnosis_sql_s", "persistence_s", "total_s")}
    return {"settled_s": round(settled, 2), "submit_s": round(submitted, 2), "dagster_runs": len(phases),
            "phases": phases, "evaluation_mean": timing}


def _wait_for_daemon(launcher, proc, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not launcher.queue_status(max_age_s=0).daemon_running:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("dagster-daemon did not start (see the daemon.log of the work folder)")
        time.sleep(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--strategies", type=int, default=7, help="how many of the applicable strategies")
    parser.add_argument("--path", action="append", choices=list(PATHS), help="default: both")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="dagster_overhead_"))
    home, datasets = work / "home", work / "datasets"
    home.mkdir()
    datasets.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    os.environ.update({"RAG_PGDATA": str(work / "pgdata"), "DAGSTER_HOME": str(home),
                       "RAG_DATASETS_DIR": str(datasets), "HF_HUB_OFFLINE": "1",
                       "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
    for name in ("RAG_DATABASE_URL", "RAG_DAGSTER_PG_URL"):
        os.environ.pop(name, None)
    sys.path.insert(0, str(ROOT))
    from benchutil import DagsterQueue as Launcher
    from benchutil import machine_line  # bench/ is on sys.path when run as a script

    from rag_pipeline.evaluation.datasets import demo as demo_dataset
    from rag_pipeline.knowledge_base.embedding import EMBEDDING_MODELS
    from rag_pipeline.service import applicability
    from rag_pipeline.service import datasets as dataset_service
    from rag_pipeline.service.knowledge_bases import ingest
    from rag_pipeline.storage import embedded_server
    from rag_pipeline.storage.engine import dagster_database_url, get_engine

    daemon = None
    try:
        engine = get_engine()
        os.environ["RAG_DAGSTER_PG_URL"] = dagster_database_url()
        kb = "demo"
        ingest(engine, ROOT / "demo" / "kb", kb, text_search=demo_dataset.DEMO_TEXT_SEARCH,
               chunk_size=demo_dataset.DEMO_CHUNK_SIZE, chunk_overlap=demo_dataset.DEMO_CHUNK_OVERLAP,
               models=list(EMBEDDING_MODELS))
        demo = json.loads((ROOT / "datasets" / "demo.json").read_text(encoding="utf-8"))
        launcher = Launcher(dict(os.environ))
        subprocess.run([sys.executable, "-m", "rag_pipeline.defs.instance"], env=launcher.environment(),
                       cwd=home, check=True, timeout=300)
        daemon = launcher.start_daemon(work / "daemon.log")
        _wait_for_daemon(launcher, daemon)
        strategies = applicability.choose_strategies(engine, kb, None)[:args.strategies]
        print(machine_line())
        print(f"{len(strategies)} strategies x {args.cases} cases: {', '.join(strategies)}")
        results: dict[str, list[dict]] = {p: [] for p in (args.path or PATHS)}
        for repeat in range(args.repeats):
            for path in results:
                name = f"overhead-{path}-{repeat}"  # a fresh dataset name each time: nothing is reused
                file = work / f"{name}.json"
                file.write_text(json.dumps({"knowledge_base": kb, "cases": demo["cases"][:args.cases]}),
                                encoding="utf-8")
                stored = dataset_service.register_dataset(engine, file)
                results[path].append(_measure(path, launcher, engine, kb, stored.dataset_id, strategies))
                print(f"{path:<13} repeat {repeat}: {json.dumps(results[path][-1])}", flush=True)
        best = {path: min(r["settled_s"] for r in rs) for path, rs in results.items()}
        print("click -> every run settled, best of", args.repeats, "(wall seconds):")
        for path, seconds in best.items():
            print(f"  {path:<13} {seconds:7.2f} s")
        if len(best) == 2:
            print(f"launcher_vs_per_strategy={best['launcher'] / best['per-strategy']:.3f}")
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(timeout=60)
        embedded_server.stop(work / "pgdata")
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
