"""Benchmark an ``http`` strategy's retriever client against a local endpoint of fixed latency.

The endpoint is a separate process (uvicorn serving a small ASGI app that sleeps ``--latency-ms`` with
``asyncio.sleep`` and answers ``{"hits": [{"id", "score"}, ...]}`` with ``--pool`` hits), so the client's process
does only the client's work. For each concurrency N in ``--concurrency`` the bench asks ``--seconds`` × N / latency
cases (at least 20) through :class:`rag_pipeline.retrieval.http_retriever.RetrieverClient` — the path an evaluation
takes: request template, the one HTTP client (httpx), response paths, id and score checks — and reports the
throughput (cases/s), the ideal N / latency and their ratio (the target at N = 16: ≥ 0.8), and the client's CPU
time per case. The database side (replies kept in batches on a worker thread, the run's one transaction) is not in
this loop.

The last line is ``ratio_c1=<r> ratio_c4=<r> ratio_c16=<r> ... load1=<l>`` (one ``ratio_cN`` per N).

Usage: python bench/http_retriever_bench.py [--latency-ms 50] [--concurrency 1,4,16] [--seconds 2] [--json-out F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
from benchutil import machine_line

from rag_pipeline.retrieval.http_retriever import Question, RetrieverClient
from rag_pipeline.retrieval.http_strategy import HttpRetriever


async def app(scope, receive, send) -> None:
    """The endpoint: ``BENCH_LATENCY_MS`` late, ``BENCH_POOL`` hits."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await asyncio.sleep(float(os.environ.get("BENCH_LATENCY_MS", "50")) / 1000)
    pool = int(os.environ.get("BENCH_POOL", "20"))
    reply = json.dumps({"hits": [{"id": f"doc-{i}", "score": 1.0 - i / pool} for i in range(pool)]}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(reply)).encode())]})
    await send({"type": "http.response.body", "body": reply})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_endpoint(latency_ms: float, pool: int) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    here = Path(__file__).resolve().parent
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "http_retriever_bench:app", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning", "--no-access-log", "--backlog", "1024"],
        cwd=here, env={**os.environ, "BENCH_LATENCY_MS": str(latency_ms), "BENCH_POOL": str(pool),
                       "PYTHONPATH": os.pathsep.join([str(here), str(here.parent), os.environ.get("PYTHONPATH", "")])})
    url = f"http://127.0.0.1:{port}/search"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(urllib.request.Request(url, data=b"{}"), timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the bench endpoint did not start")


async def _ask_all(client: RetrieverClient, questions: list[Question]) -> list:
    async with client:
        return [r async for r in client.rankings(questions)]


def measure(url: str, concurrency: int, latency_ms: float, seconds: float, pool: int) -> dict:
    n_cases = max(20, round(seconds * concurrency * 1000 / latency_ms))
    http = HttpRetriever(url=url, ids_path="hits[*].id", scores_path="hits[*].score", pool_size=pool,
                         concurrency=concurrency, retries=0,
                         request_template='{"question": "{question}", "case_id": "{case_id}", "k": "{pool_size}"}')
    questions = [Question(f"c{i:05d}", f"question {i}?", 10) for i in range(n_cases)]
    start, cpu = time.perf_counter(), time.process_time()
    rankings = asyncio.run(_ask_all(RetrieverClient(http, {}), questions))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    failed = [r for r in rankings if r.error is not None or len(r.ids) != pool]
    if len(rankings) != n_cases or failed:
        raise SystemExit(f"concurrency {concurrency}: {len(failed)} of {n_cases} cases without a full ranking")
    latencies = np.array([r.latency_ms for r in rankings])
    throughput, ideal = n_cases / elapsed, concurrency * 1000 / latency_ms
    return {"concurrency": concurrency, "cases": n_cases, "seconds": round(elapsed, 3),
            "cases_per_s": round(throughput, 2), "ideal_per_s": round(ideal, 2), "ratio": round(throughput / ideal, 3),
            "client_cpu_ms_per_case": round(cpu * 1000 / n_cases, 3),
            "latency_ms_p50": round(float(np.percentile(latencies, 50)), 2),
            "latency_ms_p95": round(float(np.percentile(latencies, 95)), 2),
            "latency_ms_max": round(float(latencies.max()), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--concurrency", default="1,4,16", help="comma-separated concurrency levels")
    parser.add_argument("--seconds", type=float, default=2.0, help="ideal duration of each level")
    parser.add_argument("--pool", type=int, default=20, help="hits per reply")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.concurrency.split(",")]
    print(machine_line(), flush=True)
    proc, url = start_endpoint(args.latency_ms, args.pool)
    try:
        rows = [measure(url, n, args.latency_ms, args.seconds, args.pool) for n in levels]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    for row in rows:
        print(f"concurrency {row['concurrency']:>3}: {row['cases']} cases in {row['seconds']:.2f} s = "
              f"{row['cases_per_s']:.1f}/s of ideal {row['ideal_per_s']:.1f}/s (ratio {row['ratio']:.3f}); "
              f"p50 {row['latency_ms_p50']} ms p95 {row['latency_ms_p95']} ms max {row['latency_ms_max']} ms; "
              f"client CPU {row['client_cpu_ms_per_case']} ms/case")
    if args.json_out:
        args.json_out.write_text(json.dumps({"latency_ms": args.latency_ms, "levels": rows}, indent=2),
                                 encoding="utf-8")
    print(" ".join(f"ratio_c{r['concurrency']}={r['ratio']}" for r in rows) + f" load1={os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
