"""One-click evaluation of N strategies × the SciFact test set under three run launchers, in the same session:
the default launcher (a run-worker subprocess per Dagster run), Celery with 1 worker and Celery with 2 workers
(deploy/celery/: `-P threads -c 1`, each worker in its own empty directory, no repository on its path).

Everything is real and fresh: the embedded PostgreSQL listening on 127.0.0.1 with a password (`db start
--listen`), the KB imported from ``$RAG_BENCH_DATA/scifact`` with both models, Debian's redis-server, a
``dagster-daemon`` per configuration, Celery workers. A click is what the API and the console call
(:func:`rag_pipeline.service.queued_runs.queue_evaluations`, run by the
daemon's ``queued_evaluations`` sensor); it is timed from the call to every run row settled, and starts once no
Dagster run is in progress and the last click's strategy comparison, which a run-status sensor launches up to 5 s
after the click's run, has ended.
Two shapes per configuration: ``1x8`` (one click of the 8 strategies: one Dagster run, one step, under the
default launcher; a Dagster run per strategy under Celery, spread over the workers) and ``2x4`` (two clicks at once,
4 strategies each). Per click: wall seconds, CPU seconds of the PostgreSQL
server (its processes, reaped backends included) and of the whole machine, the Dagster phases of each run, and the
evaluations' own timings (``RunSummary.timings``). A first, untimed click embeds the 300 questions (stored once per
model and reused by every later run, as after any first evaluation), so the timed clicks compare launchers, not
encoders. Every configuration's metrics must equal the default launcher's::

    RAG_BENCH_DATA=../shared/benchmarks python bench/celery_bench.py --strategies 8

``--demo`` runs the same on the demo knowledge base and dataset instead of SciFact (no benchmark data needed: the
CI smoke: ``.ci/run`` runs it after ``deploy/celery/smoke.sh``, where the ``celery`` extra is installed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from benchutil import postgres_cpu_seconds  # bench/ is on sys.path (run as a script)

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CONFIGS = {"default": 0, "celery-1": 1, "celery-2": 2}  # name -> Celery workers (0: the default launcher)
TIMINGS = ("embedding_s", "retrieval_sql_s", "diagnosis_sql_s", "persistence_s", "total_s")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: list[str], log: Path, cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    """A child in its own process group (stopped as a group by :func:`stop`)."""
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def wait_until(what: str, check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} not ready after {timeout:.0f} s")
        time.sleep(1)


class CpuMeter:
    """CPU seconds of the PostgreSQL server (postmaster + live backends + the backends it has reaped) and of the
    whole machine (every core's busy time), between :meth:`mark` and :meth:`read`."""

    def __init__(self, pgdata: Path):
        self.postmaster = psutil.Process(int((pgdata / "postmaster.pid").read_text().split()[0]))

    def _postgres(self) -> float:
        return postgres_cpu_seconds(self.postmaster)

    @staticmethod
    def _machine() -> float:
        t = psutil.cpu_times()
        return t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0)

    def mark(self) -> None:
        self.start = (self._postgres(), self._machine())

    def read(self) -> dict[str, float]:
        pg, machine = self._postgres() - self.start[0], self._machine() - self.start[1]
        return {"postgres_cpu_s": round(pg, 1), "machine_cpu_s": round(machine, 1),
                "other_cpu_s": round(machine - pg, 1)}


def click_and_settle(launcher, engine, kb: str, clicks: list[tuple[str, list[str]]], meter: CpuMeter) -> dict:
    """Launch every click at once (dataset id, strategies), wait until every run row has ended."""
    import dagster as dg
    from dagster_overhead import _phases, _settle  # bench/ is on sys.path

    # a click on a quiet machine: the last click's follow-up runs (its strategy comparison) end first
    busy = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
            dg.DagsterRunStatus.STARTED]
    quiet = time.perf_counter()
    while launcher.instance().get_runs(filters=dg.RunsFilter(statuses=busy)):
        if time.perf_counter() - quiet > 600:
            raise SystemExit("Dagster runs still in progress after 600 s")
        time.sleep(0.5)
    quiet = time.perf_counter() - quiet
    meter.mark()
    begin, begin_epoch = time.perf_counter(), time.time()
    runs = [r for dataset_id, strategies in clicks
            for r in launcher.launch_evaluations(engine, kb, dataset_id, strategies).runs]
    summaries = _settle(engine, runs, timeout=3600)
    wall = time.perf_counter() - begin
    failed = [f"{s.strategy_version}: {s.status} {s.error}" for s in summaries if s.status != "succeeded"]
    if failed:
        raise SystemExit(f"runs failed: {failed}")
    instance = launcher.instance()
    phases = {d: _phases(instance, d) for d in dict.fromkeys(s.dagster_run_id for s in summaries)}
    enqueued = [e.timestamp for d in phases for e in instance.all_logs(d)
                if e.dagster_event and e.dagster_event.event_type.name == "RUN_ENQUEUED"]
    usage = meter.read()
    comparisons = _await_comparisons(instance, begin_epoch, len(clicks))
    return {"settled_s": round(wall, 1), "waited_for_quiet_s": round(quiet, 1), **usage,
            "comparisons_after": comparisons,
            # the sensor's pickup: from the click to its first Dagster run's RUN_ENQUEUED
            "click_to_enqueued_s": round(min(enqueued) - begin_epoch, 2) if enqueued else None,
            "dagster_runs": len(phases),
            "workers": sorted({s.worker or "?" for s in summaries}), "phases": phases,
            "sum": {k: round(sum((s.timings or {}).get(k, 0.0) for s in summaries), 1) for k in TIMINGS},
            "metrics": {s.strategy_version: s.metrics.ndcg_at_k for s in summaries},
            "reused": sum((s.question_embeddings or {}).get("reused", 0) for s in summaries)}


def _await_comparisons(instance, since_epoch: float, expected: int, timeout_s: float = 20.0) -> dict:
    """After a click (untimed): wait until the ``compare_strategies`` run(s) its success starts have ended.

    The ``comparison_after_evaluation`` run-status sensor launches them on the daemon's next sensor pass, up to
    5 s after the click's run ends. Without this wait the next click could start in that gap and share the
    machine with the comparison's run worker. Gives up after ``timeout_s`` without the expected runs (a comparison
    that is not ready never comes)."""
    import datetime

    import dagster as dg

    after = datetime.datetime.fromtimestamp(since_epoch, tz=datetime.UTC)
    start = time.perf_counter()
    while True:
        runs = instance.get_runs(filters=dg.RunsFilter(job_name="compare_strategies", created_after=after))
        done = len(runs) >= expected and all(r.is_finished for r in runs)
        if done or (time.perf_counter() - start > timeout_s and all(r.is_finished for r in runs)):
            return {"runs": len(runs), "waited_s": round(time.perf_counter() - start, 1)}
        if time.perf_counter() - start > 600:
            raise SystemExit("compare_strategies runs still in progress after 600 s")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", type=int, default=8, help="how many of the applicable strategies (even)")
    parser.add_argument("--cases", type=int, default=0, help="the first N SciFact test queries (0: all 300)")
    parser.add_argument("--config", action="append", choices=list(CONFIGS), help="default: all three")
    parser.add_argument("--shape", action="append", choices=["1x8", "2x4"],
                        help="1x8: one click of every strategy; 2x4: two clicks at once, half each (named for "
                             "--strategies 8); default: both")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--names", help="comma-separated strategy versions instead of the first --strategies")
    parser.add_argument("--cli", action="store_true",
                        help="also time `rag-pipeline evaluate` of the same strategies (a fresh process, --repeats)")
    parser.add_argument("--floor", action="store_true",
                        help="also time bench/click_floor.py on the same data (a fresh process, --repeats)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    parser.add_argument("--demo", action="store_true", help="the demo KB and dataset instead of SciFact (a smoke)")
    args = parser.parse_args(argv)
    kb = "demo" if args.demo else "scifact"
    data = Path(os.environ.get("RAG_BENCH_DATA", ROOT.parent / "shared" / "benchmarks")) / "scifact"
    if not args.demo and not (data / "corpus.jsonl").is_file():
        raise SystemExit(f"SciFact not found in {data} (set RAG_BENCH_DATA to the folder holding scifact/)")
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server not found (Debian: apt-get install redis-server)")
    work = Path(tempfile.mkdtemp(prefix="celery_bench_"))
    for name in ("RAG_DATABASE_URL", "RAG_DAGSTER_PG_URL", "RAG_PROJECT_ROOT", "DAGSTER_HOME"):
        os.environ.pop(name, None)
    os.environ.update({"RAG_PGDATA": str(work / "pgdata"), "RAG_PROJECT_ROOT": str(work / "project"),
                       "RAG_DATASETS_DIR": str(work / "datasets"), "HF_HUB_OFFLINE": "1",
                       "PYTHONWARNINGS": "ignore::FutureWarning",
                       "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
    (work / "project").mkdir()
    (work / "datasets").mkdir()
    children: list[subprocess.Popen] = []
    try:
        pg_port, redis_port = free_port(), free_port()
        subprocess.run([str(BIN / "rag-pipeline"), "db", "start", "--listen", f"127.0.0.1:{pg_port}"],
                       check=True, capture_output=True, timeout=300)
        for line in (work / "project" / ".env").read_text().splitlines():
            if "=" in line and not line.lstrip().startswith("#"):
                key, value = line.split("=", 1)
                os.environ[key.strip()] = value.strip()
        if "@127.0.0.1:" not in os.environ.get("RAG_DATABASE_URL", ""):  # .env names the TCP listener
            raise SystemExit("db start --listen wrote no TCP RAG_DATABASE_URL into .env")
        children.append(start(["redis-server", "--bind", "127.0.0.1", "--port", str(redis_port), "--save", "",
                               "--appendonly", "no"], work / "redis.log", work, dict(os.environ)))
        os.environ["RAG_CELERY_BROKER_URL"] = f"redis://127.0.0.1:{redis_port}/0"
        sys.path.insert(0, str(ROOT / "bench"))
        from benchutil import DagsterQueue as Launcher
        from benchutil import machine_line

        from rag_pipeline.knowledge_base.embedding import EMBEDDING_MODELS
        from rag_pipeline.service import applicability
        from rag_pipeline.service import datasets as dataset_service
        from rag_pipeline.service.knowledge_bases import import_beir
        from rag_pipeline.storage.engine import get_engine

        engine = get_engine()
        t0 = time.perf_counter()
        if args.demo:  # as make run and deploy/celery/smoke.sh ingest it
            subprocess.run([str(BIN / "rag-pipeline"), "ingest", str(ROOT / "demo" / "kb"), "--knowledge-base", kb,
                            "--text-search", "chinese", "--chunk-size", "500", "--chunk-overlap", "80"],
                           check=True, capture_output=True, timeout=900)
            shutil.copy(ROOT / "datasets" / "demo.json", work / f"{kb}.json")
        else:
            from rag_pipeline.retrieval.strategies import get_strategy

            models = (sorted({get_strategy(name).embedding_model for name in args.names.split(",")}) if args.names
                      else list(EMBEDDING_MODELS))  # --names: only the models those strategies search
            import_beir(engine, data, kb, work / f"{kb}.json", split="test", models=models)
        print(f"knowledge base {kb}: {time.perf_counter() - t0:.0f} s", flush=True)
        strategies = (args.names.split(",") if args.names
                      else applicability.choose_strategies(engine, kb, None)[:args.strategies])
        dataset = json.loads((work / f"{kb}.json").read_text(encoding="utf-8"))
        if args.cases:
            dataset["cases"] = dataset["cases"][:args.cases]
        meter = CpuMeter(work / "pgdata")
        print(machine_line(), flush=True)
        print(f"{len(strategies)} strategies x {len(dataset['cases'])} cases: {', '.join(strategies)}", flush=True)

        def register(name: str) -> str:
            file = work / f"{name}.json"
            file.write_text(json.dumps({**dataset, "name": name, "knowledge_base": kb}), encoding="utf-8")
            return dataset_service.register_dataset(engine, file).dataset_id

        results: dict[str, dict] = {}
        first = True
        for config in args.config or list(CONFIGS):
            workers = CONFIGS[config]
            home = work / f"home-{config}"
            home.mkdir()
            yaml = ROOT / ("deploy/celery/dagster.yaml" if workers else "dagster.yaml")
            shutil.copy(yaml, home / "dagster.yaml")
            os.environ["DAGSTER_HOME"] = str(home)
            launcher = Launcher(dict(os.environ))
            subprocess.run([sys.executable, "-m", "rag_pipeline.defs.instance"], env=launcher.environment(),
                           cwd=home, check=True, timeout=300)
            # the daemon in its own process group, stopped with its run workers before the next configuration (the
            # configurations share Dagster's storage: a daemon left running would dequeue the next one's runs)
            running = [start([str(BIN / "dagster-daemon"), "run", "-m", "rag_pipeline.definitions"],
                             work / f"daemon-{config}.log", home, launcher.environment())]
            for w in range(1, workers + 1):  # as deploy/celery/README.md: an empty directory, no repository
                wdir = work / f"{config}-w{w}"
                (wdir / "home").mkdir(parents=True)
                shutil.copy(yaml, wdir / "home" / "dagster.yaml")
                env = {k: v for k, v in os.environ.items() if k not in {"RAG_PROJECT_ROOT", "RAG_PGDATA"}}
                env["DAGSTER_HOME"] = str(wdir / "home")
                running.append(start([str(BIN / "celery"), "-A", "rag_pipeline.defs.workers.celery_app", "worker",
                                      "-n", f"w{w}@%h", "-Q", "dagster", "-P", "threads", "-c", "1", "-l", "INFO"],
                                     work / f"{config}-w{w}.log", wdir, env))
            children.extend(running)
            wait_until("dagster-daemon", lambda up=launcher: up.queue_status(max_age_s=0).daemon_running, 300)
            for w in range(1, workers + 1):
                wait_until(f"worker w{w}", lambda w=w: subprocess.run(
                    [str(BIN / "celery"), "-A", "rag_pipeline.defs.workers.celery_app", "inspect", "ping", "-d",
                     f"w{w}@{socket.gethostname()}"], capture_output=True, env=os.environ).returncode == 0, 120)
            if first:  # the questions' vectors, once per model (every later run reuses them)
                out = click_and_settle(launcher, engine, kb, [(register("warmup"), strategies)], meter)
                print(f"warm-up click ({config}, questions embedded): {json.dumps(out)}", flush=True)
                results["warm-up"] = out
                first = False
            for shape in args.shape or ["1x8", "2x4"]:
                for repeat in range(args.repeats):
                    name = f"{config}-{shape}-{repeat}"
                    dataset_id = register(name)  # a fresh dataset version per click: nothing is reused but vectors
                    half = len(strategies) // 2
                    clicks = ([(dataset_id, strategies)] if shape == "1x8" else
                              [(dataset_id, strategies[:half]), (dataset_id, strategies[half:])])
                    out = click_and_settle(launcher, engine, kb, clicks, meter)
                    celery_named = all(w.split("@")[0] in {f"w{i}" for i in range(1, workers + 1)}
                                       for w in out["workers"])
                    if bool(workers) != celery_named:
                        raise SystemExit(f"{name}: the runs ran on {out['workers']}, not under the {config} launcher")
                    results[name] = out
                    print(f"{name}: {json.dumps(out)}", flush=True)
            for proc in running:
                stop(proc)
        for repeat in range(args.repeats if args.cli or args.floor else 0):  # the same data, the same session
            file = work / f"cli-{repeat}.json"  # a dataset is named by its file
            file.write_text(json.dumps({**dataset, "name": f"cli-{repeat}", "knowledge_base": kb}), encoding="utf-8")
            commands = {"cli": [str(BIN / "rag-pipeline"), "evaluate", "--dataset", str(file), "--output",
                                str(work / f"cli-{repeat}.json"), *[a for v in strategies for a in ("--strategy", v)]],
                        "floor": [sys.executable, str(ROOT / "bench" / "click_floor.py"), str(file),
                                  "--strategies", ",".join(strategies)]}
            for what in [w for w in ("cli", "floor") if getattr(args, w)]:
                load = os.getloadavg()[0]
                t = time.perf_counter()
                proc = subprocess.run(commands[what], capture_output=True, text=True, env=os.environ, timeout=1800)
                wall = time.perf_counter() - t
                if proc.returncode != 0:
                    raise SystemExit(f"{what} failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
                results[f"{what}-{repeat}"] = {"wall_s": round(wall, 2), "load1": round(load, 2)}
                print(f"{what}-{repeat}: {wall:.2f} s wall (a fresh process), load1 {load:.2f}", flush=True)
        reference = results.get("default-1x8-0", {}).get("metrics")
        print("\nclick -> every run settled (wall s) | CPU s: PostgreSQL / rest of the machine | Σ step timings")
        for name, out in results.items():
            if "settled_s" not in out:  # the CLI and the floor: their walls are printed above
                continue
            same = "" if reference is None or name == "warm-up" else (
                "  metrics = default" if out["metrics"] == reference else "  METRICS DIFFER")
            print(f"  {name:<16} {out['settled_s']:7.1f} s | {out['postgres_cpu_s']:6.1f} / {out['other_cpu_s']:6.1f}"
                  f" | {json.dumps(out['sum'])} runs={out['dagster_runs']} workers={out['workers']}{same}")
        if reference is not None and any(out["metrics"] != reference for n, out in results.items()
                                         if n != "warm-up" and "metrics" in out):
            return 1
        return 0
    finally:
        for proc in reversed(children):
            stop(proc)
        env = {k: v for k, v in os.environ.items() if k not in {"RAG_DATABASE_URL", "RAG_DAGSTER_PG_URL"}}
        subprocess.run([str(BIN / "rag-pipeline"), "db", "stop"], capture_output=True, timeout=120, env=env)
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
