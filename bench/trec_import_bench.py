"""Import of a large TREC run file: wall time and this process's peak RSS (the file is streamed into PostgreSQL,
never held in memory).

Setup: a knowledge base of its own (an empty one: the run's documents are an external system's), a dataset of
``--topics`` topics imported from qrels + topics files (``rag_pipeline.service.trec.import_dataset``; docnos
``doc-N``, 3 relevant per topic), and a run file of ``--lines`` lines (``--lines / --topics`` documents per topic,
random scores, lines shuffled within each topic). ``--uuid-docnos`` writes canonical UUIDs instead of strings
(no derived ids). Prints the wall time of ``import_run`` (parse + COPY + checks + metrics + the run's candidate
rows), the peak RSS before and after, and the run's mean nDCG. Everything it creates is removed at the end.

    RAG_PGDATA=/tmp/rag-bench python bench/trec_import_bench.py --lines 1000000 --topics 1000
"""

from __future__ import annotations

import argparse
import json
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

from rag_pipeline.knowledge_base.lifecycle import ensure_knowledge_base
from rag_pipeline.service import trec
from rag_pipeline.storage.engine import get_engine
from rag_pipeline.storage.evaluation_tables import CANDIDATE_PARTITION_PREFIX

RELEVANT = 3


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
            rss_before = peak_rss_mb()
            start = time.perf_counter()
            result = trec.import_run(engine, run, strategy="bench-trec-run", dataset="bench-trec",
                                     knowledge_base=kb_name)
            seconds = time.perf_counter() - start
            rss_after = peak_rss_mb()
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
