"""Import of a large TREC run file: wall time and this process's peak RSS (the file is streamed into PostgreSQL,
never held in memory).

Setup: a knowledge base of its own (an empty one: the run's documents are an external system's), a dataset of
``--topics`` topics imported from qrels + topics files (``rag_pipeline.service.trec.import_dataset``; docnos
``doc-N``, 3 relevant per topic), and a run file of ``--lines`` lines (``--lines / --topics`` documents per topic,
random scores, lines shuffled within each topic). ``--uuid-docnos`` writes canonical UUIDs instead of strings
(no derived ids). Prints the wall time of ``import_run`` (parse + COPY + checks + metrics + the run's candidate
rows), the peak RSS before and after, and the run's mean nDCG; then the time of the run's Judged@k query alone and
of ``runs rescore`` of the run on the same labels (its pools copied into a new run and scored again).
Everything it creates is removed at the end.

    RAG_PGDATA=/tmp/rag-bench python bench/trec_import_bench.py --lines 1000000 --topics 1000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy as sa
from benchutil import machine_line

from rag_pipeline.evaluation.runs.judged import judged_of_run
from rag_pipeline.knowledge_base.lifecycle import ensure_knowledge_base
from rag_pipeline.service import evaluations, trec
from rag_pipeline.storage.engine import get_engine
from rag_pipeline.storage.evaluation_tables import CANDIDATE_PARTITION_PREFIX

RELEVANT = 3


def server_cpu_s() -> float | None:
    """CPU seconds (user + system) of the embedded server's processes so far (``$RAG_PGDATA/postmaster.pid``;
    None when the server is not a local one of this machine)."""
    pid_file = Path(os.environ.get("RAG_PGDATA", "")) / "postmaster.pid"
    try:
        postmaster = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat.parent.name) == postmaster or int(fields[1]) == postmaster:  # fields[1]: the parent pid
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def client_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def write_files(folder: Path, lines: int, topics: int, uuid_docnos: bool, seed: int) -> tuple[Path, Path, Path]:
    rng = random.Random(seed)
    per_topic = lines // topics
    docno = (lambda i: str(uuid.UUID(int=i + 1))) if uuid_docnos else (lambda i: f"doc-{i}")
    qrels, topics_file, run = folder / "bench.qrels", folder / "bench.topics.jsonl", folder / "bench.run"
    with qrels.open("w") as q, topics_file.open("w") as t, run.open("w") as r:
        for n in range(topics):
            qid = f"t{n}"
            t.write(json.dumps({"qid": qid, "question": f"question {n}?", "k": 10}) + "\n")
            docs = rng.sample(range(per_topic * 20), per_topic)
            for d in rng.sample(docs, RELEVANT):
                q.write(f"{qid} 0 {docno(d)} {rng.randint(1, 3)}\n")
            r.writelines(f"{qid} Q0 {docno(d)} {i + 1} {rng.random():.6f} bench\n" for i, d in enumerate(docs))
    return qrels, topics_file, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--uuid-docnos", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    engine = get_engine()
    kb_name = f"bench-trec-{uuid.uuid4().hex[:8]}"
    with engine.begin() as conn:
        ensure_knowledge_base(conn, kb_name, text_search="simple", chunk_size=500, chunk_overlap=0)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            qrels, topics, run = write_files(Path(tmp), args.lines, args.topics, args.uuid_docnos, args.seed)
            size_mb = run.stat().st_size / 1024 / 1024
            trec.import_dataset(engine, qrels, topics, name="bench-trec", knowledge_base=kb_name)
            rss_before, server_before, client_before = peak_rss_mb(), server_cpu_s(), client_cpu_s()
            start = time.perf_counter()
            result = trec.import_run(engine, run, strategy="bench-trec-run", dataset="bench-trec",
                                     knowledge_base=kb_name)
            seconds = time.perf_counter() - start
            rss_after, server_after, client = peak_rss_mb(), server_cpu_s(), client_cpu_s() - client_before
            start = time.perf_counter()
            with engine.connect() as conn:  # what each run's finalisation adds, on its own
                judged = judged_of_run(conn, result.run_id)
            judged_s = time.perf_counter() - start
            start = time.perf_counter()
            rescored = evaluations.rescore(engine, result.run_id, "bench-trec", version=result.dataset_version)
            rescore_s = time.perf_counter() - start
    finally:
        with engine.begin() as conn:
            runs = conn.execute(sa.text("SELECT r.id FROM retrieval_evaluation_runs r JOIN knowledge_bases k "
                                        "ON k.id = r.knowledge_base_id WHERE k.name = :kb"), {"kb": kb_name}).all()
            for (run_id,) in runs:
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {CANDIDATE_PARTITION_PREFIX}{run_id.hex}"))
            conn.execute(sa.text("DELETE FROM retrieval_evaluation_datasets WHERE knowledge_base_name = :kb"),
                         {"kb": kb_name})
            conn.execute(sa.text("DELETE FROM knowledge_bases WHERE name = :kb"), {"kb": kb_name})
    print(machine_line())
    print(f"file: {result.lines:,} lines, {size_mb:.1f} MB, {args.topics} topics, "
          f"{'UUID' if args.uuid_docnos else 'string'} docnos")
    print(f"stored: {result.lines_stored:,} candidates, {result.cases} cases, "
          f"ndcg_at_k={result.metrics['ndcg_at_k']:.4f}")
    print(f"import_s={seconds:.2f} lines_per_s={result.lines / seconds:,.0f} peak_rss_before_mb={rss_before:.0f} "
          f"peak_rss_after_mb={rss_after:.0f}")
    server = "n/a" if server_after is None or server_before is None else f"{server_after - server_before:.2f}"
    print(f"cpu_s: client={client:.2f} server={server} (CPU time used; the wall time on an idle machine is "
          "about their sum, as the two mostly take turns)")
    print("phases: " + " ".join(f"{k}={v:.2f}" for k, v in result.timings.items()))
    print(f"judged_of_run_s={judged_s:.2f} (Judged@k {judged.at_k:.4f}); runs_rescore_s={rescore_s:.2f} (same "
          f"labels: ndcg_at_k {rescored.run.metrics.ndcg_at_k:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
