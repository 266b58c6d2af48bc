"""What a Dagster partition run costs end to end (``dagster job execute``: process start, code load, storage writes,
the evaluation itself), the shipped in-process ``evaluate_retrieval`` job against the same job on Dagster's
multiprocess executor (the default before), measured in the same run on the same partition.

Needs the demo knowledge base (``make run`` ingests it) and the embedded server (or ``RAG_DATABASE_URL``)::

    python bench/dagster_overhead.py --cases 10 --repeats 2

Run through ``dagster job execute -f bench/dagster_overhead.py``: this module also defines the code location (the
shipped definitions plus a multiprocess copy of the job).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rag_pipeline import definitions as _shipped  # noqa: E402
from rag_pipeline.defs.evaluation import GROUP  # noqa: E402

_multiprocess = dg.define_asset_job("evaluate_retrieval_multiprocess", selection=dg.AssetSelection.groups(GROUP),
                                    executor_def=dg.multiprocess_executor)
defs = dg.Definitions.merge(_shipped.defs, dg.Definitions(jobs=[_multiprocess]))


def _run(job: str, partition: str, env: dict, cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run([str(Path(sys.executable).with_name("dagster")), "job", "execute", "-f", __file__, "-j", job,
                           "--tags", json.dumps({"dagster/partition": partition})],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{job} failed:\n{proc.stderr[-2000:]}")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    from benchutil import machine_line  # bench/ is on sys.path when run as a script

    from rag_pipeline.storage.engine import dagster_database_url

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--strategy", default="keyword-v1")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="dagster_overhead_"))
    try:
        demo = json.loads((ROOT / "datasets" / "demo.json").read_text(encoding="utf-8"))
        name = f"overhead{args.cases}"
        datasets = work / "datasets"
        datasets.mkdir()
        (datasets / f"{name}.json").write_text(json.dumps({"knowledge_base": demo["knowledge_base"],
                                                           "cases": demo["cases"][:args.cases]}), encoding="utf-8")
        home = work / "home"
        home.mkdir()
        shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
        env = {**os.environ, "DAGSTER_HOME": str(home), "RAG_DAGSTER_PG_URL": dagster_database_url(),
               "RAG_DATASETS_DIR": str(datasets), "PYTHONPATH": str(ROOT)}
        os.environ.update({k: env[k] for k in ("DAGSTER_HOME", "RAG_DAGSTER_PG_URL")})
        with dg.DagsterInstance.get() as instance:
            instance.add_dynamic_partitions("dataset", [name])
        partition = f"{name}|{args.strategy}"
        print(machine_line())
        times: dict[str, list[float]] = {"evaluate_retrieval": [], "evaluate_retrieval_multiprocess": []}
        for _ in range(args.repeats):
            for job in times:
                times[job].append(_run(job, partition, env, work))
        best = {job: min(t) for job, t in times.items()}
        print(f"partition {partition} ({args.cases} cases), best of {args.repeats}, wall seconds of "
              "`dagster job execute`:")
        for job, seconds in best.items():
            print(f"  {job:<32} {seconds:6.2f} s   (all: {', '.join(f'{t:.2f}' for t in times[job])})")
        ratio = best["evaluate_retrieval"] / best["evaluate_retrieval_multiprocess"]
        print(f"in_process_vs_multiprocess={ratio:.3f} in_process_s={best['evaluate_retrieval']:.2f} "
              f"multiprocess_s={best['evaluate_retrieval_multiprocess']:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
