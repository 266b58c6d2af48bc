"""Evaluation throughput benchmark: the pipeline vs the seed's per-case loop, against the embedding floor.

SYNTHETIC data (``bench/synthetic.py``): a knowledge base of ``--chunks`` chunks with **random unit
vectors** (labelled, benchmark only) and ``--cases`` generated questions with valid labels. The KB is
generated and ingested in a child process (so this process's peak RSS is the evaluation's), then, in
this one process and on the same database:

1. the floor: pure embedding time of the questions with the real default embedder (USE), batched as the
   pipeline batches them — measured before and after the pipeline, the mean is used;
2. the seed-style baseline (``bench/seed_baseline.py``) on the first ``--skip-baseline-over`` cases at most;
3. the pipeline, :func:`rag_pipeline.evaluation.evaluate.evaluate_dataset` (``--pipeline-subprocess``: in a
   child process, so its peak RSS is its own), with its recorded time split (the batch loop is pipelined:
   ``--readers`` worker threads search batches in parallel while the main thread embeds and writes, so the
   parts overlap); fusion and every embedding call are timed by wrapping those functions (SQL = retrieval -
   fusion); ``--without-diagnosis`` stubs the per-batch miss diagnosis out;
4. a check that baseline and pipeline stored the same candidate pools;
5. HNSW vs exact top-10 recall at the strategy's ``ef_search`` (and a few others) with real question
   embeddings, plus an EXPLAIN that the vector leg uses the model's HNSW index;
6. ingestion: ``ingest_documents`` of ``--ingest-texts`` generated chunk-sized texts with real USE vs
   ``embedder.embed`` of the same texts alone;
7. two strategy partitions as two concurrent ``dagster job execute`` runs (multiprocess executor) on an
   instance configured by the repo's ``dagster.yaml`` (``--dagster-cases 0`` skips it).

8. the retrieval step alone (``hybrid_search_batch`` over the same batches with the same read connections and
   threads, the main thread embedding each batch as the run does): ``sql_share`` = its wall / the pipeline's
   wall (1 = the pipeline costs exactly its retrieval); the same with the vectors given (SQL only); the
   keyword leg's time per question inside the pipeline (``keyword_ms_per_q``).

The last line is ``speedup_vs_seed=<x> sql_share=<s> keyword_ms_per_q=<ms> eval_over_embed=<y>
persist_rows_per_s=<z> peak_rss_mb=<m> load1=<1-minute load average at the end>``.

Usage: python bench/eval_bench.py --chunks 100000 --cases 1000 [--strategy hybrid-v1] [--readers 2]
       [--skip-baseline-over 2000] [--pipeline-subprocess] [--without-diagnosis] [--recall-queries 100]
       [--ingest-texts 2000] [--dagster-cases 200] [--text-only | --model-vectors] [--json-out results.json]
``--text-only``: a KB without vectors (keyword-only strategies); ``--model-vectors``: the real model's vectors of the
generated texts instead of random ones (the distribution of a real KB; slow to build: every chunk is encoded).
Database: ``RAG_DATABASE_URL`` or the embedded server in ``RAG_PGDATA`` (use a scratch directory).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from rag_pipeline.evaluation.datasets.load import Dataset, load_dataset  # noqa: E402
from rag_pipeline.knowledge_base.embedding import get_embedder  # noqa: E402
from rag_pipeline.retrieval import search as retrieval  # noqa: E402
from rag_pipeline.retrieval import sql as retrieval_sql  # noqa: E402
from rag_pipeline.retrieval.strategies import get_strategy  # noqa: E402
from rag_pipeline.storage.engine import get_engine, hnsw_index_name  # noqa: E402

BENCH_PREFIX = "synthetic-bench-"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def machine() -> str:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal"))
        ram = f"{mem_kb / 1024 / 1024:.1f}GiB"
    except (OSError, StopIteration):
        ram = "?"
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"cpu={cpu!r} cores={os.cpu_count()} ram={ram} load={load} python={platform.python_version()} "
            f"numpy={np.__version__}")


def _fmt(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else "nan"


# ---------------------------------------------------------------------------------------------- phases

def generate(args) -> Path:
    """Generate + ingest the KB and write the dataset JSON, in a child process (keeps this RSS clean)."""
    # the file name is the dataset's name; BENCH_PREFIX lets clean_previous_runs find its runs
    text = "-text" if args.text_only else "-model" if args.model_vectors else ""
    out = (Path(tempfile.mkdtemp(prefix="eval_bench_"))
           / f"{BENCH_PREFIX}{args.chunks}-{args.cases}-s{args.seed}{text}.json")
    cmd = [sys.executable, str(ROOT / "bench" / "synthetic.py"), "--chunks", str(args.chunks),
           "--cases", str(args.cases), "--seed", str(args.seed), "--out", str(out)] \
        + (["--text-only"] if args.text_only else []) + (["--model-vectors"] if args.model_vectors else [])
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"synthetic generation failed (exit {proc.returncode})")
    for line in proc.stdout.splitlines():
        if not line.startswith("wrote "):
            print(line)
    print(f"generation (child process): {time.perf_counter() - t:.1f}s")
    return out


def clean_previous_runs(engine: sa.Engine) -> int:
    """Delete earlier bench runs (their candidates and case results cascade) so tables do not grow."""
    with engine.begin() as conn:
        return conn.execute(sa.text(
            "DELETE FROM retrieval_evaluation_runs r USING retrieval_evaluation_datasets d "
            "WHERE r.dataset_id = d.id AND d.name LIKE :p"), {"p": BENCH_PREFIX + "%"}).rowcount


def embed_floor(questions: list[str], model: str) -> tuple[float, np.ndarray]:
    embedder = get_embedder(model)
    t = time.perf_counter()
    vectors = embedder.embed(questions)
    return time.perf_counter() - t, vectors


class PhaseTimers:
    """Time functions of core by wrapping them where the pipeline looks them up (module attributes):
    ``retrieval.fuse_pool`` (fusion inside the retrieval step), ``Embedder.embed`` (every embedding call,
    so re-embedding outside the batch loop shows up), and ``diagnosis_db.diagnose_batch`` /
    ``diagnosis_db.score_chunks`` (per-batch miss diagnosis; summed over the worker threads)."""

    def __init__(self):
        from rag_pipeline.knowledge_base import embedding

        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._targets = [("fusion", retrieval, "fuse_pool"), ("embed_calls", embedding.Embedder, "embed"),
                         ("keyword_leg", retrieval, "_keyword_leg")]
        try:
            from rag_pipeline.evaluation.diagnosis import diagnose as diagnosis_db

            self._targets += [("diagnose_batch", diagnosis_db, "diagnose_batch"),
                              ("diagnosis_scores", diagnosis_db, "score_chunks")]
        except ImportError:
            pass
        self._saved: list = []

    def __enter__(self):
        for label, owner, name in self._targets:
            if not hasattr(owner, name):
                continue
            orig = getattr(owner, name)
            self.seconds[label], self.calls[label] = 0.0, 0

            def timed(*a, _orig=orig, _label=label, **kw):
                t = time.perf_counter()
                try:
                    return _orig(*a, **kw)
                finally:
                    self.seconds[_label] += time.perf_counter() - t
                    self.calls[_label] += 1
            self._saved.append((owner, name, orig))
            setattr(owner, name, timed)
        return self

    def __exit__(self, *exc):
        for owner, name, orig in reversed(self._saved):
            setattr(owner, name, orig)


def retrieval_alone(engine: sa.Engine, dataset: Dataset, strategy, vectors: np.ndarray | None,
                    readers: int | None) -> dict:
    """The retrieval step alone at the pipeline's parallelism: the same batches, the same ``readers`` snapshot
    connections and worker threads, nothing but ``hybrid_search_batch`` (and, for a BM25 leg, loading the KB's
    postings once, as the run does). ``vectors=None``: the main thread embeds each batch's questions and hands
    it to a worker, as the run does (retrieval incl. its embedding); else the vectors are given (SQL only)."""
    from concurrent.futures import ThreadPoolExecutor

    from rag_pipeline.evaluation.evaluate import BATCH_SIZE
    from rag_pipeline.knowledge_base.chunking import knowledge_base_id
    from rag_pipeline.retrieval.bm25_index import Bm25Index
    from rag_pipeline.storage.snapshot_readers import reader_count, snapshot_readers

    n = reader_count(readers)
    cases = dataset.cases
    kb = knowledge_base_id(dataset.knowledge_base)
    embedder = get_embedder(strategy.embedding_model) if strategy.vector_candidate_k else None
    t = time.perf_counter()
    with snapshot_readers(engine, n) as pool, ThreadPoolExecutor(max_workers=n) as workers:
        index = None
        if strategy.keyword_candidate_k and strategy.keyword_scorer == "bm25":
            with pool.borrow() as conn:
                index = Bm25Index.load(conn, kb, strategy.bm25_k1, strategy.bm25_b, borrow=pool.borrow, parts=n)
        load_s = time.perf_counter() - t

        def one(batch, vecs) -> int:
            with pool.borrow() as conn:
                return len(retrieval.hybrid_search_batch(
                    conn, knowledge_base_id=kb, queries=[c.question for c in batch], strategy=strategy,
                    limits=[c.k for c in batch], query_vectors=vecs, keyword_index=index))

        futures = []
        for start in range(0, len(cases), BATCH_SIZE):
            batch = cases[start:start + BATCH_SIZE]
            vecs = None
            if embedder is not None:
                vecs = embedder.embed([c.question for c in batch]) if vectors is None else \
                    vectors[start:start + len(batch)]
            futures.append(workers.submit(one, batch, vecs))
        done = sum(f.result() for f in futures)
    return {"wall_s": time.perf_counter() - t, "cases": done, "readers": n, "index_load_s": load_s,
            "embeds": vectors is None}


def _no_diagnosis(conn, kb, strategy, cases, *args, **kwargs):  # noqa: ARG001 - diagnose_batch's signature
    return [[] for _ in cases]


def run_pipeline(engine: sa.Engine, dataset: Dataset, strategy, *, without_diagnosis: bool = False,
                 readers: int | None = None) -> dict:
    from unittest import mock

    from rag_pipeline.evaluation.evaluate import evaluate_dataset

    patch = None
    if without_diagnosis:
        from rag_pipeline.evaluation.diagnosis import diagnose as diagnosis_db

        patch = mock.patch.object(diagnosis_db, "diagnose_batch", _no_diagnosis)
        patch.start()
    try:
        with PhaseTimers() as timers:
            t = time.perf_counter()
            outcome = evaluate_dataset(engine, dataset, strategy, readers=readers)
            wall = time.perf_counter() - t
    finally:
        if patch:
            patch.stop()
    return {"run_id": outcome.run_id, "wall_s": wall, "case_count": outcome.case_count,
            "candidate_count": outcome.candidate_count, "timings": dict(outcome.timings),
            "fusion_s": timers.seconds["fusion"], "phases": timers.seconds, "calls": timers.calls,
            "averages": outcome.averages, "peak_rss_mb": peak_rss_mb(), "summary": outcome.summary.model_dump()}


def run_pipeline_child(dataset_path: Path, strategy_version: str, without_diagnosis: bool,
                       readers: int | None) -> dict:
    """The pipeline in a fresh process (model warmed first, untimed); its own peak RSS."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child-pipeline", str(dataset_path),
           "--strategy", strategy_version] + (["--without-diagnosis"] if without_diagnosis else []) \
        + ([] if readers is None else ["--readers", str(readers)])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-5000:] + proc.stderr[-5000:])
        raise SystemExit(f"pipeline child failed (exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child_pipeline(dataset_path: Path, strategy_version: str, without_diagnosis: bool, readers: int | None) -> int:
    strategy = get_strategy(strategy_version)
    dataset = load_dataset(dataset_path)
    engine = get_engine()
    get_embedder(strategy.embedding_model).embed([c.question for c in dataset.cases[:8]])  # load the model
    result = run_pipeline(engine, dataset, strategy, without_diagnosis=without_diagnosis, readers=readers)
    print(json.dumps(result, default=str))
    return 0


def compare_pools(engine: sa.Engine, baseline_run: str, pipeline_run: str) -> dict:
    """Per case: same chunk ids in the same ranks, and the largest final-score difference."""
    with engine.connect() as conn:
        row = conn.execute(sa.text("""
            WITH b AS (SELECT case_id, rank, chunk_id, final_score FROM retrieval_evaluation_candidates
                       WHERE evaluation_run_id = :b),
                 p AS (SELECT case_id, rank, chunk_id, final_score FROM retrieval_evaluation_candidates
                       WHERE evaluation_run_id = :p AND case_id IN (SELECT DISTINCT case_id FROM b)),
                 j AS (SELECT coalesce(b.case_id, p.case_id) AS case_id, b.chunk_id AS bc, p.chunk_id AS pc,
                              abs(b.final_score - p.final_score) AS d
                       FROM b FULL JOIN p ON p.case_id = b.case_id AND p.rank = b.rank)
            SELECT count(DISTINCT case_id) AS cases,
                   count(DISTINCT case_id) FILTER (WHERE bc IS DISTINCT FROM pc) AS differing_cases,
                   coalesce(max(d), 0) AS max_score_diff,
                   (SELECT count(*) FROM b) AS baseline_rows
            FROM j"""), {"b": baseline_run, "p": pipeline_run}).one()
    return dict(row._mapping)


def persistence_alone(engine: sa.Engine, run_id: str) -> dict:
    """COPY the run's candidate rows again with nothing else running, by one binary COPY
    into the real storage (the run's partition of ``retrieval_evaluation_candidate_rows`` and its index), in a
    transaction that first deletes the run's own rows (untimed) and is rolled back. In the pipelined run the same
    COPY shares the cores with the readers."""
    from rag_pipeline.evaluation.runs import results as persistence
    from rag_pipeline.evaluation.runs.case_queries import copy_rows

    cols = ", ".join(persistence.CANDIDATE_COLUMNS)
    params = {"r": run_id}
    with engine.connect() as conn:
        rows = [tuple(r) for r in conn.execute(sa.text(
            f"SELECT {cols} FROM retrieval_evaluation_candidate_rows WHERE evaluation_run_id = :r"), params)]
    with engine.connect() as conn, conn.begin() as tx:
        conn.execute(sa.text("DELETE FROM retrieval_evaluation_candidate_rows WHERE evaluation_run_id = :r"), params)
        t = time.perf_counter()
        n = copy_rows(conn, "retrieval_evaluation_candidate_rows", persistence.CANDIDATE_COLUMNS, rows,
                      persistence.CANDIDATE_TYPES)
        seconds = time.perf_counter() - t
        tx.rollback()
    return {"rows": n, "seconds": seconds, "rows_per_s": n / max(seconds, 1e-9)}


def hnsw_recall(engine: sa.Engine, kb_name: str, strategy, vectors: np.ndarray, ef_values: list[int]) -> dict:
    """Top-10 overlap of the HNSW vector leg with exact search (index scans disabled), same filters."""
    model = strategy.embedding_model
    with engine.connect() as conn:
        kb = conn.execute(sa.text("SELECT id FROM knowledge_bases WHERE name = :n"), {"n": kb_name}).scalar_one()
        dim = conn.execute(sa.text(retrieval_sql.MODEL_DIMENSION_SQL), {"model": model}).scalar_one()
    sql = sa.text(retrieval_sql.vector_leg_sql(dim))
    exact_sql = sa.text(retrieval_sql.vector_leg_sql(dim, exact=True))  # the leg's own exact fallback statement
    params = {"kb": kb, "model": model, "k": 10, "query_vectors": list(vectors.astype(np.float32))}

    scores: dict[str, list[list[float]]] = {}

    def top10(rows, label: str | None = None) -> list[set[str]]:
        out = [set() for _ in range(len(vectors))]
        got = [[] for _ in range(len(vectors))]
        for r in rows:
            out[r.query_index - 1].add(str(r.chunk_id))
            got[r.query_index - 1].append(float(r.score))
        if label:
            scores[label] = [sorted(g, reverse=True) for g in got]
        return out

    result: dict = {"queries": len(vectors), "ef_search_default": strategy.ef_search, "recall": {}, "seconds": {},
                    "index": hnsw_index_name(model, kb)}
    with engine.connect() as conn:
        result["index_rows"] = dict(conn.execute(sa.text(
            "SELECT count(*) FILTER (WHERE knowledge_base_id = :kb) AS this_kb, "
            "count(*) FILTER (WHERE knowledge_base_id <> :kb) AS other_kbs "
            "FROM chunk_embeddings WHERE model = :m"), {"kb": kb, "m": model}).one()._mapping)
        result["dead_tuples"] = conn.execute(sa.text(
            "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'chunk_embeddings'")).scalar()
    with engine.connect() as conn, conn.begin():
        conn.execute(sa.text(retrieval_sql.VECTOR_SETTINGS_SQL), {"ef_search": strategy.ef_search})
        plan = "\n".join(r[0] for r in conn.execute(sa.text("EXPLAIN (COSTS OFF) " + exact_sql.text),
                                                         {**params, "query_vectors": params["query_vectors"][:1]}))
        if hnsw_index_name(model, kb) in plan:
            raise RuntimeError("the exact reference still uses the HNSW index:\n" + plan)
        t = time.perf_counter()
        exact = top10(conn.execute(exact_sql, params), "exact")
        result["seconds"]["exact"] = time.perf_counter() - t
    result["recall_in_distribution"] = _recall_in_distribution(engine, sql, exact_sql, kb, model, strategy.ef_search,
                                                               len(vectors))
    for ef in ef_values:
        with engine.connect() as conn, conn.begin():
            conn.execute(sa.text(retrieval_sql.VECTOR_SETTINGS_SQL), {"ef_search": ef})
            if ef == strategy.ef_search:
                plan = "\n".join(r[0] for r in conn.execute(
                    sa.text("EXPLAIN (COSTS OFF) " + sql.text),
                    {**params, "query_vectors": params["query_vectors"][:1]}))
                result["explain"] = plan
                result["uses_hnsw_index"] = hnsw_index_name(model, kb) in plan
                if not result["uses_hnsw_index"]:  # the planner may prefer a scan on a tiny KB: is it usable?
                    conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
                    conn.execute(sa.text("SET LOCAL enable_sort = off"))  # only the index gives the order
                    forced = "\n".join(r[0] for r in conn.execute(
                        sa.text("EXPLAIN (COSTS OFF) " + sql.text),
                        {**params, "query_vectors": params["query_vectors"][:1]}))
                    conn.execute(sa.text("SET LOCAL enable_seqscan = on"))
                    conn.execute(sa.text("SET LOCAL enable_sort = on"))
                    result["hnsw_index_usable"] = hnsw_index_name(model, kb) in forced
                else:
                    result["hnsw_index_usable"] = True
            t = time.perf_counter()
            approx = top10(conn.execute(sql, params), "hnsw" if ef == strategy.ef_search else None)
            result["seconds"][ef] = time.perf_counter() - t
        result["recall"][ef] = float(np.mean([len(a & e) / max(len(e), 1) for a, e in zip(approx, exact)]))
    def mean_at(label: str, i: int) -> float:
        return float(np.mean([g[i] for g in scores.get(label, []) if len(g) > i] or [np.nan]))

    result["score_gap"] = {"exact_1st": mean_at("exact", 0), "exact_10th": mean_at("exact", 9),
                           "hnsw_10th": mean_at("hnsw", 9)}
    return result


def _recall_in_distribution(engine: sa.Engine, sql, exact_sql, kb, model: str, ef: int, n: int) -> float:
    """Recall@10 for queries that *have* near neighbours: stored KB vectors plus small noise (cos ~0.9)."""
    rng = np.random.default_rng(11)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT embedding FROM chunk_embeddings WHERE knowledge_base_id = :kb AND model = :m "
            "ORDER BY chunk_id LIMIT :n"), {"kb": kb, "m": model, "n": n}).scalars().all()
    base = np.array([np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, dtype=np.float32)
                     for v in rows])  # pgvector's Vector (SQLAlchemy type) or numpy (psycopg loader)
    noisy = base + rng.standard_normal(base.shape).astype(np.float32) * (0.5 / np.sqrt(base.shape[1]))
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
    params = {"kb": kb, "model": model, "k": 10, "query_vectors": list(noisy)}

    def top10(conn, statement) -> list[set[str]]:
        out = [set() for _ in range(len(noisy))]
        for r in conn.execute(statement, params):
            out[r.query_index - 1].add(str(r.chunk_id))
        return out

    with engine.connect() as conn, conn.begin():
        conn.execute(sa.text(retrieval_sql.VECTOR_SETTINGS_SQL), {"ef_search": ef})
        exact = top10(conn, exact_sql)
    with engine.connect() as conn, conn.begin():
        conn.execute(sa.text(retrieval_sql.VECTOR_SETTINGS_SQL), {"ef_search": ef})
        approx = top10(conn, sql)
    return float(np.mean([len(a & e) / max(len(e), 1) for a, e in zip(approx, exact)]))


def ingestion_vs_encode(engine: sa.Engine, n_texts: int, model: str, seed: int) -> dict:
    """Real USE: ingest_documents of n generated chunk-sized texts vs embedder.embed of the same texts."""
    from synthetic import generate_documents

    from rag_pipeline.knowledge_base.ingestion import ingest_documents
    from rag_pipeline.knowledge_base.sources import SourceDocument

    name = f"bench-ingest-{uuid.uuid4().hex[:8]}"
    _, chunks = generate_documents(n_texts, name, seed=seed + 101)
    texts = [c.content for c in chunks]
    docs = [SourceDocument(f"ingest/{i:05d}.txt", None, t) for i, t in enumerate(texts)]
    embedder = get_embedder(model)
    embedder.embed(texts[:16])  # warm
    t = time.perf_counter()
    embedder.embed(texts)
    raw1 = time.perf_counter() - t
    t = time.perf_counter()
    result = ingest_documents(engine, docs, name, text_search="english", chunk_size=None, models=(model,))
    ingest = time.perf_counter() - t
    t = time.perf_counter()
    embedder.embed(texts)
    raw2 = time.perf_counter() - t
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM knowledge_bases WHERE name = :n"), {"n": name})
    # The deleted KB's vectors stay in the table (and its own, now unused index) as dead tuples until vacuumed:
    # clean up after us (before per-KB indexes they degraded other KBs' searches: recall@10 0.128 -> 0.025).
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM chunk_embeddings"))
    raw = (raw1 + raw2) / 2
    return {"texts": n_texts, "chars_mean": float(np.mean([len(t) for t in texts])), "raw_encode_s": raw,
            "raw_encode_runs_s": [raw1, raw2], "ingest_s": ingest, "ratio": ingest / raw,
            "chunks_per_s": result.chunks_inserted / ingest, "ingest_timings": result.timings}


def instance_config(home: Path) -> str:
    """Copy the repo's ``dagster.yaml`` into ``home``; if Dagster rejects it, write the equivalent valid
    form (``run_coordinator.config.max_concurrent_runs`` moved to ``concurrency.runs``) and say so."""
    import yaml
    from dagster._core.instance.config import dagster_instance_config

    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    try:
        dagster_instance_config(str(home))
        return "repo dagster.yaml"
    except Exception as exc:  # noqa: BLE001 - reported, then the corrected copy is used
        config = yaml.safe_load((ROOT / "dagster.yaml").read_text(encoding="utf-8"))
        runs_limit = (config.get("run_coordinator", {}).get("config") or {}).pop("max_concurrent_runs", None)
        if not config.get("run_coordinator", {}).get("config"):
            config.get("run_coordinator", {}).pop("config", None)
        if runs_limit is not None:
            config.setdefault("concurrency", {}).setdefault("runs", {})["max_concurrent_runs"] = runs_limit
        (home / "dagster.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        dagster_instance_config(str(home))
        return (f"repo dagster.yaml is rejected by Dagster ({str(exc).splitlines()[0]}); used it with "
                f"max_concurrent_runs moved to concurrency.runs")


def dagster_two_partitions(engine: sa.Engine, dataset: Dataset, n_cases: int, strategies: list[str]) -> dict:
    """Two strategy partitions of one dataset as two concurrent ``dagster job execute`` runs."""
    import dagster as dg

    from rag_pipeline.storage.engine import dagster_database_url

    work = Path(tempfile.mkdtemp(prefix="eval_bench_dagster_"))
    datasets, home = work / "datasets", work / "dagster_home"
    datasets.mkdir()
    home.mkdir()
    key = f"{BENCH_PREFIX}dg"
    (datasets / f"{key}.json").write_text(json.dumps({
        "name": key, "knowledge_base": dataset.knowledge_base,
        "cases": [c.as_dict() for c in dataset.cases[:n_cases]]}), encoding="utf-8")
    config_note = instance_config(home)
    env = {**os.environ, "DAGSTER_HOME": str(home), "RAG_DAGSTER_PG_URL": dagster_database_url(),
           "RAG_DATASETS_DIR": str(datasets),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    saved = {k: os.environ.get(k) for k in ("DAGSTER_HOME", "RAG_DAGSTER_PG_URL")}
    os.environ.update({k: env[k] for k in saved})
    try:
        with dg.DagsterInstance.get() as instance:
            instance.add_dynamic_partitions("dataset", [key])
            # Create the `rag_db` pool row once, before two runs start at the same moment: otherwise both
            # lazily insert it and one run fails on concurrency_limits' unique key (seen with Dagster 1.13
            # on Postgres storage, whose insert-then-update fallback runs in an aborted transaction).
            if "rag_db" not in instance.event_log_storage.get_concurrency_keys():
                instance.event_log_storage.initialize_concurrency_limit_to_default("rag_db")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    dagster = Path(sys.executable).with_name("dagster")
    t = time.perf_counter()
    procs = [subprocess.Popen(
        [str(dagster), "job", "execute", "-m", "rag_pipeline.definitions", "-j", "evaluate_retrieval",
         "--tags", json.dumps({"dagster/partition": f"{key}|{s}"})],
        cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for s in strategies]
    outputs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - t
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT partition_key, status, case_count, dagster_run_id, started_at, "
            "(timings->>'total_s')::float AS eval_s, coalesce((timings->>'embedding_s')::float, 0) "
            "+ coalesce((timings->>'retrieval_sql_s')::float, 0) + coalesce((timings->>'metrics_s')::float, 0) "
            "+ coalesce((timings->>'persistence_s')::float, 0) AS loop_s "
            "FROM retrieval_evaluation_runs WHERE partition_key = ANY(:k) "
            "ORDER BY started_at DESC"), {"k": [f"{key}|{s}" for s in strategies]}).all()
    latest = {}
    for r in rows:
        latest.setdefault(r.partition_key, r)
    runs = list(latest.values())
    overlap = None
    if len(runs) == 2 and all(r.eval_s for r in runs):
        # each run's batch loop starts when its run row is inserted (started_at) and ends before started_at +
        # its wall time total_s (which also counts the preflight before the row; finished_at is the write
        # transaction's start: now() is per transaction). The loop timings overlap each other (parallel readers).
        starts = [r.started_at.timestamp() for r in runs]
        ends = [r.started_at.timestamp() + r.eval_s for r in runs]
        overlap = max(0.0, min(ends) - max(starts))
    shutil.rmtree(work, ignore_errors=True)
    return {"config": config_note, "wall_s": wall, "exit_codes": [p.returncode for p in procs], "cases": n_cases,
            "runs": [{"partition": r.partition_key, "status": r.status, "cases": r.case_count,
                      "eval_s": r.eval_s, "loop_s": r.loop_s, "dagster_run_id": r.dagster_run_id} for r in runs],
            "overlap_s": overlap,
            "tail": [o[-1500:] for o, p in zip(outputs, procs) if p.returncode != 0]}


# ---------------------------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--strategy", default="hybrid-v1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-baseline-over", type=int, default=2000, metavar="Q",
                        help="run the seed baseline on at most the first Q cases (0: no baseline)")
    parser.add_argument("--pipeline-subprocess", action="store_true",
                        help="run the pipeline in a child process (its own peak RSS)")
    parser.add_argument("--recall-queries", type=int, default=100, help="0 skips the HNSW recall check")
    parser.add_argument("--ef-search", default="40,100,200,400", help="ef_search values for the recall table")
    parser.add_argument("--ingest-texts", type=int, default=2000, help="0 skips the ingestion comparison")
    parser.add_argument("--dagster-cases", type=int, default=200, help="0 skips the 2-partition Dagster run")
    parser.add_argument("--dagster-strategies", default="hybrid-v1,keyword-v1")
    parser.add_argument("--without-diagnosis", action="store_true",
                        help="replace core's per-batch miss diagnosis (diagnosis_db.diagnose_batch) by a no-op")
    parser.add_argument("--readers", type=int, default=None,
                        help="parallel read connections of the pipeline (default: RAG_EVAL_READERS or 2)")
    parser.add_argument("--keep-runs", action="store_true", help="keep earlier bench runs in the database")
    parser.add_argument("--text-only", action="store_true",
                        help="a KB without embeddings (much faster to build; keyword-only strategies such as bm25-v1)")
    parser.add_argument("--model-vectors", action="store_true",
                        help="the KB's vectors are the real model's of the generated texts, not random (slow to build)")
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--child-pipeline", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_pipeline:
        return child_pipeline(args.child_pipeline, args.strategy, args.without_diagnosis, args.readers)

    strategy = get_strategy(args.strategy)
    if args.text_only and args.model_vectors:
        parser.error("--text-only and --model-vectors exclude each other")
    if args.text_only and strategy.vector_candidate_k:
        parser.error(f"--text-only builds a KB without embeddings: {strategy.version} has a vector leg")
    vectors = "no vectors" if args.text_only else "model vectors" if args.model_vectors else "random unit vectors"
    print(f"SYNTHETIC benchmark: {args.chunks} chunks ({vectors}, Zipf texts) x {args.cases} cases, "
          f"strategy {strategy.version}")
    print(f"machine: {machine()}")
    dataset_path = generate(args)
    dataset = load_dataset(dataset_path)
    engine = get_engine()
    with engine.connect() as conn:
        server = conn.execute(sa.text(
            "SELECT split_part(version(), ' ', 2) || ', pgvector ' || "
            "(SELECT extversion FROM pg_extension WHERE extname = 'vector') || ', shared_buffers ' || "
            "current_setting('shared_buffers') || ', work_mem ' || current_setting('work_mem')")).scalar()
    print(f"server: PostgreSQL {server}")
    report_server = server
    if not args.keep_runs:
        print(f"removed {clean_previous_runs(engine)} earlier bench run(s)")
    questions = [c.question for c in dataset.cases]
    model = strategy.embedding_model
    get_embedder(model).embed(questions[:64])  # load + warm the model (untimed)
    report: dict = {"chunks": args.chunks, "cases": len(dataset.cases), "strategy": strategy.version,
                    "machine": machine(), "server": report_server}

    floor1, vectors = embed_floor(questions, model)
    print(f"floor: embedding {len(questions)} questions (USE, batches of 64): {floor1:.2f}s")

    n_base = len(questions) if args.skip_baseline_over <= 0 else min(len(questions), args.skip_baseline_over)
    base = None
    if args.skip_baseline_over > 0:
        from seed_baseline import run_seed_baseline

        base = run_seed_baseline(engine, dataset, strategy, dataset.cases[:n_base])
        bt = base.timings
        print(f"seed baseline: {base.case_count} cases in {base.wall_s:.2f}s = {base.case_count / base.wall_s:.1f} "
              f"cases/s | embed {bt['embedding_s']:.2f}s, SQL {bt['sql_s']:.2f}s, fusion+metrics "
              f"{bt['fusion_metrics_s']:.2f}s, persistence (ORM add + commit) {bt['persistence_s']:.2f}s, "
              f"{base.candidate_count / max(bt['persistence_s'], 1e-9):.0f} rows/s")
        report["baseline"] = {"cases": base.case_count, "wall_s": base.wall_s, "timings": bt,
                              "candidates": base.candidate_count}

    if args.pipeline_subprocess:
        pipe = run_pipeline_child(dataset_path, strategy.version, args.without_diagnosis, args.readers)
        rss_label = "pipeline child process"
    else:
        pipe = run_pipeline(engine, dataset, strategy, without_diagnosis=args.without_diagnosis,
                            readers=args.readers)
        rss_label = "bench process (baseline + pipeline)"
    rss = pipe["peak_rss_mb"]
    floor2, _ = embed_floor(questions, model)
    floor = (floor1 + floor2) / 2
    tm = pipe["timings"]
    sql_s = tm["retrieval_sql_s"] - pipe["fusion_s"]
    persist_rate = pipe["candidate_count"] / max(tm["persistence_s"], 1e-9)
    pipe_rate = pipe["case_count"] / pipe["wall_s"]
    readers = pipe.get("summary", {}).get("readers", 1)
    if args.without_diagnosis:
        print("NOTE: pipeline timed WITHOUT core's per-batch miss diagnosis (--without-diagnosis)")
    print(f"pipeline ({readers} read connection(s), batches pipelined): {pipe['case_count']} cases in "
          f"{pipe['wall_s']:.2f}s = {pipe_rate:.1f} cases/s")
    print(f"  main thread: embed {tm['embedding_s']:.2f}s, metrics {tm['metrics_s']:.2f}s, persistence (COPY) "
          f"{tm['persistence_s']:.2f}s; worker threads (summed over {readers}): retrieval SQL {sql_s:.2f}s + fusion "
          f"{pipe['fusion_s']:.2f}s, miss diagnosis {tm.get('diagnosis_sql_s', 0.0):.2f}s (its missing-leg score SQL "
          f"{pipe.get('phases', {}).get('diagnosis_scores', 0.0):.2f}s)")
    ph = pipe.get("phases", {})
    extra_embed = ph.get("embed_calls", 0.0) - tm["embedding_s"]
    print(f"  embedding outside the batch loop {max(extra_embed, 0.0):.2f}s "
          f"({pipe.get('calls', {}).get('embed_calls', 0)} embed calls in all)")
    print(f"persistence: {pipe['candidate_count']} candidate rows (+{pipe['case_count']} case rows) in "
          f"{tm['persistence_s']:.2f}s = {persist_rate:.0f} candidate rows/s (in the run, sharing the cores)")
    alone = persistence_alone(engine, pipe["run_id"])
    print(f"persistence alone: the same {alone['rows']} rows COPYed with nothing else running in "
          f"{alone['seconds']:.2f}s = {alone['rows_per_s']:.0f} rows/s (into the table itself, rolled back)")
    report["persistence_alone"] = alone
    print(f"floor: second measurement {floor2:.2f}s, mean {floor:.2f}s; eval/embed = {pipe['wall_s'] / floor:.3f}")
    print(f"peak RSS ({rss_label}): {rss:.0f} MB")
    speedup = float("nan")
    if base is not None:
        speedup = pipe_rate / (base.case_count / base.wall_s)
        same = compare_pools(engine, base.run_id, pipe["run_id"])
        print(f"speedup vs seed baseline: {speedup:.1f}x | pools: {same['cases'] - same['differing_cases']}/"
              f"{same['cases']} cases identical, max |final_score diff| {same['max_score_diff']:.2g}")
        report["pools"] = {k: float(v) for k, v in same.items()}
    alone = retrieval_alone(engine, dataset, strategy, None, args.readers)
    sql_only = retrieval_alone(engine, dataset, strategy, vectors, args.readers)
    sql_share = alone["wall_s"] / pipe["wall_s"]
    keyword_ms = 1000 * pipe.get("phases", {}).get("keyword_leg", 0.0) / max(pipe["case_count"], 1)
    in_run_sql = (sql_s / readers) / pipe["wall_s"]
    print(f"retrieval alone ({alone['readers']} read connection(s), same batches, main thread embedding them): "
          f"{alone['cases']} cases in {alone['wall_s']:.2f}s (BM25 index load {alone['index_load_s']:.2f}s) -> "
          f"pipeline wall / retrieval wall = {pipe['wall_s'] / alone['wall_s']:.3f} (sql_share {sql_share:.3f})")
    print(f"retrieval SQL alone (vectors given): {sql_only['wall_s']:.2f}s -> pipeline wall / it = "
          f"{pipe['wall_s'] / sql_only['wall_s']:.3f}; in the run: retrieval SQL summed over the workers / "
          f"readers = {sql_s / readers:.2f}s = {in_run_sql:.3f} of the pipeline wall")
    print(f"keyword leg in the pipeline: {keyword_ms:.3f} ms per question (summed over the worker threads; scorer "
          f"{strategy.keyword_scorer}{', in-memory BM25 index' if strategy.keyword_scorer == 'bm25' else ''})")
    report["retrieval_sql_alone"] = sql_only
    report.update({"retrieval_alone": alone, "sql_share": sql_share, "keyword_ms_per_q": keyword_ms})
    report.update({"pipeline": pipe, "floor_s": [floor1, floor2], "speedup_vs_seed": speedup,
                   "eval_over_embed": pipe["wall_s"] / floor, "persist_rows_per_s": persist_rate,
                   "peak_rss_mb": rss, "peak_rss_scope": rss_label})

    if args.recall_queries > 0 and strategy.vector_candidate_k:
        efs = sorted({int(x) for x in args.ef_search.split(",") if x} | {strategy.ef_search})
        rec = hnsw_recall(engine, dataset.knowledge_base, strategy, vectors[:args.recall_queries], efs)
        print(f"HNSW: vector leg uses index {rec['index']} (its KB's own): {rec['uses_hnsw_index']} "
              f"(index usable by the vector leg: {rec['hnsw_index_usable']})")
        print("  " + "\n  ".join(rec["explain"].splitlines()))
        print(f"HNSW recall@10 vs exact ({rec['queries']} real question embeddings; "
              f"exact {rec['seconds']['exact']:.1f}s): "
              + ", ".join(f"ef_search={ef}: {r:.3f} ({rec['seconds'][ef]:.2f}s)" for ef, r in rec["recall"].items()))
        rows = rec["index_rows"]
        print(f"  its index holds this KB's {rows['this_kb']} vectors only "
              f"(the table holds {rows['other_kbs']} of other "
              f"KBs, which no longer share a graph with it; ~{rec['dead_tuples']} dead tuples in the table)")
        gap = rec["score_gap"]
        print(f"  mean cosine of the exact 1st / 10th neighbour {gap['exact_1st']:.4f} / {gap['exact_10th']:.4f}, "
              f"of HNSW's 10th {gap['hnsw_10th']:.4f} (near-ties: random vectors have no real neighbours)")
        print(f"HNSW recall@10 at ef_search={strategy.ef_search} for in-distribution queries (a stored vector + "
              f"noise, cos ~0.9): {rec['recall_in_distribution']:.3f}")
        report["hnsw"] = rec

    if args.ingest_texts > 0:
        ing = ingestion_vs_encode(engine, args.ingest_texts, model, args.seed)
        print(f"ingestion: {ing['texts']} texts (mean {ing['chars_mean']:.0f} chars) ingest_documents "
              f"{ing['ingest_s']:.2f}s = {ing['chunks_per_s']:.1f} chunks/s vs raw encode {ing['raw_encode_s']:.2f}s "
              f"(runs {ing['raw_encode_runs_s'][0]:.2f}s, {ing['raw_encode_runs_s'][1]:.2f}s) -> ratio "
              f"{ing['ratio']:.3f}")
        report["ingestion"] = ing

    if args.dagster_cases > 0:
        strategies = [s for s in args.dagster_strategies.split(",") if s][:2]
        dg_res = dagster_two_partitions(engine, dataset, min(args.dagster_cases, len(dataset.cases)), strategies)
        print(f"dagster: 2 partitions ({', '.join(strategies)}) x {dg_res['cases']} cases as 2 concurrent runs "
              f"(multiprocess executor): wall {dg_res['wall_s']:.1f}s, exit codes {dg_res['exit_codes']}, "
              f"evaluation loops overlapped {dg_res['overlap_s'] if dg_res['overlap_s'] is not None else 'n/a'}s")
        print(f"  instance config: {dg_res['config']}")
        for r in dg_res["runs"]:
            print(f"  {r['partition']}: {r['status']}, {r['cases']} cases, eval {r['eval_s']}s")
        for tail in dg_res["tail"]:
            print("  failed run output: " + tail.replace("\n", "\n    "))
        report["dagster"] = dg_res

    report["machine_end"] = machine()
    print(f"machine at end: {report['machine_end']}")
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    shutil.rmtree(dataset_path.parent, ignore_errors=True)
    print(f"speedup_vs_seed={_fmt(speedup)} sql_share={_fmt(sql_share)} keyword_ms_per_q={_fmt(keyword_ms)} "
          f"eval_over_embed={_fmt(pipe['wall_s'] / floor)} persist_rows_per_s={_fmt(persist_rate)} "
          f"peak_rss_mb={_fmt(rss)} load1={os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
