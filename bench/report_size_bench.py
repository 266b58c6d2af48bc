"""Report sizes per ``--candidates`` mode and format: SciFact (real USE vectors) and a synthetic 4,000-case run.

Evaluates ``--strategy`` (default ``hybrid-bm25-v1``: 100 + 100 candidates per case) on each dataset, then writes the
run's report in every mode (:data:`rag_pipeline.evaluation.runs.reports.CANDIDATE_MODES`) as JSON and JSON Lines to a
byte-counting sink, with the time; the baseline is ``all`` (the full pool, what every report was before). It also
measures the peak Python memory (tracemalloc) of the streamed JSON Lines report against ``build_report`` (the whole
report as one dict) in mode ``all``: streaming stays flat, the dict grows with the run.

    RAG_PGDATA=/tmp/rag-bench python bench/report_size_bench.py [--scifact ../shared/benchmarks/scifact]
        [--synthetic-cases 4000] [--strategy hybrid-bm25-v1]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchutil import machine_line
from synthetic import build_knowledge_base, make_dataset

from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.evaluation.runs.reports import CANDIDATE_MODES, write_report
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline.service.knowledge_bases import import_beir
from rag_pipeline.settings import get_settings
from rag_pipeline.storage.engine import get_engine

ROOT = Path(__file__).resolve().parents[1]


class Counter:
    """A text sink that only counts UTF-8 bytes."""

    def __init__(self) -> None:
        self.bytes = 0

    def write(self, text: str) -> int:
        self.bytes += len(text.encode("utf-8"))
        return len(text)


def build_report(conn, run_id: str, candidates: str) -> dict:
    """The whole report of one run as one dict: :func:`write_report`'s JSON, parsed."""
    buffer = io.StringIO()
    write_report(conn, run_id, buffer, candidates=candidates)
    return json.loads(buffer.getvalue())


def sizes(engine, run_id: str, label: str) -> None:
    base = {}
    for fmt in ("json", "jsonl"):
        for mode in ("all", *[m for m in CANDIDATE_MODES if m != "all"]):
            sink = Counter()
            t = time.perf_counter()
            with engine.connect() as conn:
                n = write_report(conn, run_id, sink, candidates=mode, fmt=fmt)
            seconds = time.perf_counter() - t
            base.setdefault(fmt, sink.bytes)
            print(f"| {label} | {n} | {fmt} | {mode} | {sink.bytes / 2**20:.2f} MiB | "
                  f"{sink.bytes / base[fmt]:.3f} | {seconds:.1f} s |", flush=True)
    with engine.connect() as conn:
        tracemalloc.start()
        write_report(conn, run_id, Counter(), candidates="all", fmt="jsonl")
        streamed = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        report = build_report(conn, run_id, candidates="all")
        whole = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        del report
    print(f"  {label}: peak Python memory, mode all: streamed jsonl {streamed / 2**20:.1f} MiB vs build_report "
          f"{whole / 2**20:.1f} MiB ({whole / max(streamed, 1):.1f}×)", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench_data = get_settings().bench_data or ROOT.parent / "shared" / "benchmarks"
    p.add_argument("--scifact", default=str(Path(bench_data) / "scifact"), help="BEIR SciFact folder ('' = skip)")
    p.add_argument("--synthetic-cases", type=int, default=4000, help="0 = skip")
    p.add_argument("--strategy", default="hybrid-bm25-v1")
    args = p.parse_args(argv)
    engine = get_engine()
    strategy = get_strategy(args.strategy)
    print(machine_line())
    print("| run | cases | format | --candidates | size | vs all | write time |")
    print("|---|---:|---|---|---:|---:|---:|")
    if args.scifact:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "scifact.json"
            import_beir(engine, args.scifact, "beir-scifact-reports", out, models=(strategy.embedding_model,))
            dataset = load_dataset(out)
        t = time.perf_counter()
        outcome = evaluate_dataset(engine, dataset, strategy)
        print(f"  SciFact: evaluated {outcome.case_count} cases, {outcome.candidate_count} candidates in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
        sizes(engine, outcome.run_id, f"SciFact {args.strategy}")
    if args.synthetic_cases:
        kb = build_knowledge_base(engine, max(2 * args.synthetic_cases, 8000))
        dataset = make_dataset(kb, args.synthetic_cases)
        t = time.perf_counter()
        outcome = evaluate_dataset(engine, dataset, strategy)
        print(f"  synthetic: evaluated {outcome.case_count} cases, {outcome.candidate_count} candidates in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
        sizes(engine, outcome.run_id, f"synthetic {args.synthetic_cases} {args.strategy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
