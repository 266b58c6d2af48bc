"""Benchmark answer collection (``rag-pipeline answers collect``) against a local endpoint of fixed latency.

The endpoint is a separate process (uvicorn serving a small ASGI app that sleeps ``--latency-ms`` with
``asyncio.sleep`` and answers ``{"answer", "citations", "contexts"}``), so the collector's process does only the
collector's work. For each concurrency N in ``--concurrency`` the bench collects ``--seconds`` × N / latency
cases (at least 20) into a fresh answers file through :func:`rag_pipeline.service.answer_collection.collect_answers`
— the real path: request template, httpx, response paths, one write + fsync per line — and reports the
throughput (cases/s), the ideal N / latency and their ratio (the target at N = 16: ≥ 0.8), and the
collector's CPU time per case (all its threads), which bounds the throughput one core can give.

The last line is ``ratio_c1=<r> ratio_c4=<r> ratio_c16=<r> ... load1=<l>`` (one ``ratio_cN`` per N).

Usage: python bench/collect_bench.py [--latency-ms 50] [--concurrency 1,4,16] [--seconds 2] [--json-out F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchutil import machine_line

from rag_pipeline.contracts.answers import EndpointConfig
from rag_pipeline.service.answer_collection import collect_answers


async def app(scope, receive, send) -> None:
    """The endpoint: ``BENCH_LATENCY_MS`` late, the same reply shape as a plain RAG service."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    case_id = json.loads(body or b"{}").get("case_id", "?")
    await asyncio.sleep(float(os.environ.get("BENCH_LATENCY_MS", "50")) / 1000)
    reply = json.dumps({"answer": f"answer to {case_id}", "citations": [f"c-{case_id}"],
                        "contexts": [f"c-{case_id}", "other"]}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(reply)).encode())]})
    await send({"type": "http.response.body", "body": reply})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_endpoint(latency_ms: float) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    here = Path(__file__).resolve().parent
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "collect_bench:app", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning", "--no-access-log", "--backlog", "1024"],
        cwd=here, env={**os.environ, "BENCH_LATENCY_MS": str(latency_ms),
                       "PYTHONPATH": os.pathsep.join([str(here), str(here.parent), os.environ.get("PYTHONPATH", "")])})
    url = f"http://127.0.0.1:{port}/rag"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(urllib.request.Request(url, data=b'{"case_id": "ping"}'), timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the bench endpoint did not start")


def write_dataset(folder: Path, n: int) -> Path:
    cases = [{"case_id": f"c{i:05d}", "question": f"question {i}?", "k": 5,
              "relevant_chunk_ids": ["00000000-0000-4000-8000-000000000000"]} for i in range(n)]
    path = folder / f"bench{n}.json"
    path.write_text(json.dumps({"name": path.stem, "knowledge_base": "bench", "cases": cases}), encoding="utf-8")
    return path


def measure(url: str, concurrency: int, latency_ms: float, seconds: float, folder: Path) -> dict:
    n_cases = max(20, round(seconds * concurrency * 1000 / latency_ms))
    dataset = write_dataset(folder, n_cases)
    output = folder / f"answers-c{concurrency}.jsonl"
    config = EndpointConfig(url=url, concurrency=concurrency, timeout_s=30, retries=0)
    start, cpu = time.perf_counter(), time.process_time()
    result = collect_answers(dataset, output, endpoint=config)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    if result.status != "succeeded" or result.answered != n_cases:
        raise SystemExit(f"collection at concurrency {concurrency} did not answer every case: {result}")
    throughput = n_cases / elapsed
    ideal = concurrency * 1000 / latency_ms
    return {"concurrency": concurrency, "cases": n_cases, "seconds": round(elapsed, 3),
            "cases_per_s": round(throughput, 2), "ideal_per_s": round(ideal, 2), "ratio": round(throughput / ideal, 3),
            "client_cpu_ms_per_case": round(cpu * 1000 / n_cases, 3), "latency_ms_p50": result.latency_ms_p50,
            "latency_ms_p95": result.latency_ms_p95,
            "lines": sum(1 for _ in output.open(encoding="utf-8"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--concurrency", default="1,4,16", help="comma-separated concurrency levels")
    parser.add_argument("--seconds", type=float, default=2.0, help="ideal duration of each level")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.concurrency.split(",")]
    print(machine_line(), flush=True)
    proc, url = start_endpoint(args.latency_ms)
    try:
        with tempfile.TemporaryDirectory(prefix="collect_bench_") as tmp:
            rows = [measure(url, n, args.latency_ms, args.seconds, Path(tmp)) for n in levels]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    for row in rows:
        print(f"concurrency {row['concurrency']:>3}: {row['cases']} cases in {row['seconds']:.2f} s = "
              f"{row['cases_per_s']:.1f}/s of ideal {row['ideal_per_s']:.1f}/s (ratio {row['ratio']:.3f}); "
              f"p50 {row['latency_ms_p50']} ms p95 {row['latency_ms_p95']} ms; "
              f"client CPU {row['client_cpu_ms_per_case']} ms/case")
    if args.json_out:
        args.json_out.write_text(json.dumps({"latency_ms": args.latency_ms, "levels": rows}, indent=2),
                                 encoding="utf-8")
    load = f"{os.getloadavg()[0]:.2f}"
    print(" ".join(f"ratio_c{r['concurrency']}={r['ratio']}" for r in rows) + f" load1={load}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
