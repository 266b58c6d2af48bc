"""Vector leg per knowledge base: KB A's recall@10 vs exact search and its vector-leg time, alone, next to a live KB B
of the same size and model, and after B is deleted (no VACUUM).

A is an already ingested KB (default ``beir-scifact-reports``, SciFact with real USE vectors, as
``report_size_bench.py`` leaves it); its questions are the dataset's, their vectors read from
``question_embeddings`` or embedded. B is a copy of A under another name: other documents, chunks and ids, the
same real vectors (same size, same model, maximally close to A's queries: the hardest neighbour), with its own
index created as ingestion does. The baseline is A alone, measured in the same run.

    RAG_PGDATA=/tmp/rag-bench python bench/kb_isolation_bench.py [--kb beir-scifact-reports] [--queries 300]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchutil import machine_line

from rag_pipeline.knowledge_base.embedding import get_embedder
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.retrieval import sql as retrieval_sql
from rag_pipeline.storage.engine import ensure_embedding_model, get_engine

MODEL = "use-multilingual-v3"
K, EF = 10, 100

COPY_KB_SQL = [
    "INSERT INTO knowledge_bases (id, name, text_search, chunk_size, chunk_overlap, chunk_count, avg_chunk_length) "
    "SELECT :b, :bname, text_search, chunk_size, chunk_overlap, chunk_count, avg_chunk_length FROM knowledge_bases "
    "WHERE id = :a",
    "CREATE TEMP TABLE doc_map ON COMMIT DROP AS SELECT id AS old, gen_random_uuid() AS new FROM documents "
    "WHERE knowledge_base_id = :a",
    "CREATE TEMP TABLE chunk_map ON COMMIT DROP AS SELECT id AS old, gen_random_uuid() AS new FROM document_chunks "
    "WHERE knowledge_base_id = :a AND is_current",
    "INSERT INTO documents (id, knowledge_base_id, original_name, title, content, content_hash, status, "
    "publication_status, is_deleted) SELECT m.new, :b, d.original_name, d.title, d.content, d.content_hash, d.status, "
    "d.publication_status, d.is_deleted FROM documents d JOIN doc_map m ON m.old = d.id",
    "INSERT INTO document_chunks (id, knowledge_base_id, document_id, ordinal, content, content_hash, char_start, "
    "char_end, content_tsvector, token_count, is_current) SELECT cm.new, :b, dm.new, c.ordinal, c.content, "
    "c.content_hash, c.char_start, c.char_end, c.content_tsvector, c.token_count, true FROM document_chunks c "
    "JOIN chunk_map cm ON cm.old = c.id JOIN doc_map dm ON dm.old = c.document_id",
    "INSERT INTO chunk_embeddings (chunk_id, model, knowledge_base_id, embedding) SELECT cm.new, e.model, :b, "
    "e.embedding FROM chunk_embeddings e JOIN chunk_map cm ON cm.old = e.chunk_id WHERE e.model = :m",
]


def top10(engine, kb_id, vectors, *, exact: bool) -> tuple[list[set[str]], float]:
    with engine.begin() as conn:
        dim = conn.execute(sa.text(retrieval_sql.MODEL_DIMENSION_SQL), {"model": MODEL}).scalar()
        conn.execute(sa.text(retrieval_sql.VECTOR_SETTINGS_SQL), {"ef_search": EF})
        t = time.perf_counter()
        rows = conn.execute(sa.text(retrieval_sql.vector_leg_sql(dim, exact=exact)),
                            {"kb": kb_id, "model": MODEL, "k": K, "query_vectors": list(vectors)}).all()
        seconds = time.perf_counter() - t
    out = [set() for _ in vectors]
    for r in rows:
        out[r.query_index - 1].add(str(r.chunk_id))
    return out, seconds


def recall(approx, exact) -> float:
    return float(np.mean([len(a & e) / max(len(e), 1) for a, e in zip(approx, exact, strict=True)]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kb", default="beir-scifact-reports")
    p.add_argument("--queries", type=int, default=300)
    args = p.parse_args(argv)
    engine = get_engine()
    with engine.connect() as conn:
        a = resolve_knowledge_base(conn, args.kb)
        questions = conn.execute(sa.text(
            "SELECT c->>'question' FROM retrieval_evaluation_datasets d, jsonb_array_elements(d.cases) c "
            "WHERE d.knowledge_base_name = :n LIMIT :q"), {"n": a.name, "q": args.queries}).scalars().all()
        n_vectors = conn.execute(sa.text("SELECT count(*) FROM chunk_embeddings WHERE knowledge_base_id = :kb "
                                         "AND model = :m"), {"kb": a.id, "m": MODEL}).scalar()
    vectors = get_embedder(MODEL).embed(questions)
    print(machine_line())
    print(f"KB A {a.name}: {n_vectors} vectors of {MODEL}; {len(questions)} queries; k={K}, ef_search={EF}")
    exact, exact_s = top10(engine, a.id, vectors, exact=True)
    rows = []

    def measure(label: str) -> None:
        approx, seconds = top10(engine, a.id, vectors, exact=False)
        rows.append((label, recall(approx, exact), seconds))

    measure("A alone (baseline)")
    b_id, b_name = uuid.uuid4(), f"{a.name}-copy-{uuid.uuid4().hex[:6]}"
    with engine.begin() as conn:
        ensure_embedding_model(conn, MODEL, 512, get_embedder(MODEL).backend, b_id)  # as ingestion does
    t = time.perf_counter()
    with engine.begin() as conn:
        for stmt in COPY_KB_SQL:
            conn.execute(sa.text(stmt), {"a": a.id, "b": b_id, "bname": b_name, "m": MODEL})
    copy_s = time.perf_counter() - t
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("ANALYZE chunk_embeddings, document_chunks"))
    measure(f"+ live KB B ({n_vectors} copies of A's vectors)")
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM knowledge_bases WHERE id = :b"), {"b": b_id})
    measure("B deleted, no VACUUM")
    print(f"(KB B built in {copy_s:.1f} s; exact search {exact_s:.2f} s for all queries)")
    print("| KB A's vector leg | recall@10 vs exact | Δ vs alone | time, all queries | ratio vs alone |")
    print("|---|---:|---:|---:|---:|")
    for label, r, s in rows:
        print(f"| {label} | {r:.4f} | {r - rows[0][1]:+.4f} | {s:.2f} s | {s / rows[0][2]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
