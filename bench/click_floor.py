"""The floor of one click: the same work as the pipeline's click, done by a plain script of the bench's own.

For the shipped USE strategies of a click (``click_bench.STRATEGIES``) on a knowledge base the pipeline has
evaluated (question vectors already in ``question_embeddings``, as for the pipeline's second click), in one fresh
process: read the knowledge base's searchable vectors (binary) and postings once, the questions' lexemes and
vectors; then per strategy the legs (exact dense top k by one matrix product, BM25 or ts_rank_cd top k by one
sparse product), the fusion (weighted raw / min-max, or RRF), the final top k and the metrics (P, R, MRR, nDCG at
k). No leg is approximate (the HNSW strategies' legs are exact here), nothing is stored, no miss is diagnosed: it
is the arithmetic of the click and the reading of its inputs, which is what the pipeline cannot go below.

Used by ``click_bench.py --floor`` (a child process, like a click). Alone:
``RAG_PGDATA=<scratch> python bench/click_floor.py DATASET.json [--strategies a,b,...]`` prints one JSON line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SEARCHABLE = ("c.knowledge_base_id = :kb AND c.is_current AND d.status = 'READY' "
              "AND d.publication_status = 'PUBLISHED' AND NOT d.is_deleted")


def floor(dataset_path: Path, strategies: list[str]) -> dict:
    t0 = time.perf_counter()
    import numpy as np
    import scipy.sparse as sp
    import sqlalchemy as sa

    from rag_pipeline.retrieval.strategies import load_registry
    from rag_pipeline.storage.engine import get_engine

    registry = load_registry()
    chosen = [registry[s] for s in strategies]
    data = json.loads(dataset_path.read_text(encoding="utf-8"))
    cases = data["cases"]
    questions = [c["question"] for c in cases]
    relevant = [set(c["relevant_chunk_ids"]) for c in cases]
    ks = np.array([int(c.get("k", 10)) for c in cases])
    model = next(s.embedding_model for s in chosen if s.vector_candidate_k)
    with get_engine().connect() as conn:
        kb = conn.execute(sa.text("SELECT id, text_search FROM knowledge_bases WHERE name = :n"),
                          {"n": data["knowledge_base"]}).one()
        p = {"kb": kb.id, "model": model}
        chunks = conn.execute(sa.text(
            f"SELECT c.id::text AS id, uuid_send(c.id) AS key, c.token_count FROM document_chunks c JOIN documents d "
            f"ON d.id = c.document_id WHERE {SEARCHABLE} ORDER BY c.id"), p).all()
        column = {r.id: i for i, r in enumerate(chunks)}
        rows = conn.execute(sa.text(
            f"SELECT c.id::text AS id, vector_send(e.embedding) AS data FROM chunk_embeddings e JOIN document_chunks c "
            f"ON c.id = e.chunk_id JOIN documents d ON d.id = c.document_id WHERE e.model = :model AND {SEARCHABLE} "
            "ORDER BY c.id"), p).all()
        dim = int.from_bytes(bytes(rows[0].data)[:2], "big")
        vectors = np.frombuffer(b"".join(bytes(r.data)[4:] for r in rows), dtype=">f4").astype(np.float32)
        vectors = vectors.reshape(len(rows), dim)
        vector_cols = np.array([column[r.id] for r in rows])
        postings = conn.execute(sa.text(
            "SELECT ct.lexeme, count(*) AS n, string_agg(uuid_send(ct.chunk_id) || int4send(ct.tf), ''::bytea) AS data "
            "FROM chunk_terms ct WHERE ct.knowledge_base_id = :kb GROUP BY ct.lexeme"), p).all()
        hashes = [hashlib.sha256(q.encode("utf-8")).digest() for q in questions]
        stored = {bytes(r.h): bytes(r.data) for r in conn.execute(sa.text(
            "SELECT question_hash AS h, vector_send(embedding) AS data FROM question_embeddings "
            "WHERE model = :model AND question_hash = ANY(:hashes)"), {"model": model, "hashes": hashes})}
        cfg = {"chinese": "simple", "mixed": "simple"}.get(kb.text_search, kb.text_search)
        lexemes = conn.execute(sa.text(
            "SELECT q.ord, u.lexeme FROM unnest(CAST(:texts AS text[])) WITH ORDINALITY AS q(t, ord), "
            "unnest(to_tsvector(CAST(:cfg AS regconfig), q.t)) AS u"), {"texts": questions, "cfg": cfg}).all()
    missing = sum(h not in stored for h in hashes)
    if missing:
        raise SystemExit(f"{missing} question vectors are not stored: run a click of the pipeline first")
    query_vectors = np.array([np.frombuffer(stored[h][4:], dtype=">f4") for h in hashes], dtype=np.float32)
    terms = {r.lexeme: i for i, r in enumerate(postings)}
    posting = np.frombuffer(b"".join(bytes(r.data) for r in postings), dtype=[("id", "S16"), ("tf", ">i4")])
    term_of = np.repeat(np.arange(len(postings)), [r.n for r in postings])
    keys = np.array([bytes(r.key) for r in chunks], dtype="S16")
    col = np.minimum(np.searchsorted(keys, posting["id"]), len(keys) - 1)
    found = keys[col] == posting["id"]
    n_docs = len(chunks)
    tf = sp.csr_array((posting["tf"][found].astype(np.float64), (term_of[found], col[found])),
                      shape=(len(terms), n_docs))
    q_rows, q_cols = zip(*[(r.ord - 1, terms[r.lexeme]) for r in lexemes if r.lexeme in terms], strict=True)
    query_terms = sp.csr_array((np.ones(len(q_rows)), (q_rows, q_cols)), shape=(len(questions), len(terms)))
    t_load = time.perf_counter()

    df = np.diff(tf.indptr)
    dl = np.array([r.token_count for r in chunks], dtype=np.float64)
    idf = np.log(1 + (n_docs - df + 0.5) / (df + 0.5))
    coo = tf.tocoo()
    k1, b = 0.9, 0.4
    weight = idf[coo.row] * coo.data * (k1 + 1) / (coo.data + k1 * (1 - b + b * dl[coo.col] / dl.mean()))
    bm25 = sp.csr_array((weight, (coo.row, coo.col)), shape=tf.shape)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    q_unit = query_vectors / np.linalg.norm(query_vectors, axis=1, keepdims=True)
    dense_all = np.full((len(questions), n_docs), -np.inf)
    dense_all[:, vector_cols] = q_unit @ unit.T
    keyword_all = {"bm25": (query_terms @ bm25).toarray()}
    counts = (query_terms @ tf).toarray()
    w = 0.1 * counts
    keyword_all["ts_rank_cd"] = np.where(counts > 0, w / (w + 1), 0.0)
    rel = np.zeros((len(questions), n_docs), dtype=bool)
    for i, ids in enumerate(relevant):
        rel[i, [column[c] for c in ids if c in column]] = True

    def top(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        idx = np.argpartition(-scores, min(k, scores.shape[1] - 1), axis=1)[:, :k]
        part = np.take_along_axis(scores, idx, axis=1)
        order = np.argsort(-part, axis=1, kind="stable")
        return np.take_along_axis(idx, order, axis=1), np.take_along_axis(part, order, axis=1)

    results = {}
    discount = 1 / np.log2(np.arange(2, 1002))
    for s in chosen:
        fused = np.zeros((len(questions), n_docs))
        pool = np.zeros((len(questions), n_docs), dtype=bool)
        for _leg, k, weight_, scores in (("vector", s.vector_candidate_k, s.vector_weight, dense_all),
                                       ("keyword", s.keyword_candidate_k, s.keyword_weight,
                                        keyword_all[s.keyword_scorer])):
            if not k:
                continue
            idx, val = top(scores, k)
            np.put_along_axis(pool, idx, True, axis=1)
            if s.fusion == "rrf":
                contrib = 1.0 / (s.rrf_k + np.arange(1, k + 1))[None, :].repeat(len(questions), 0)
            elif s.normalization == "minmax":
                lo, hi = val.min(axis=1, keepdims=True), val.max(axis=1, keepdims=True)
                contrib = weight_ * np.where(hi > lo, (val - lo) / np.where(hi > lo, hi - lo, 1), 1.0)
            else:
                contrib = weight_ * val
            np.put_along_axis(fused, idx, np.take_along_axis(fused, idx, axis=1) + contrib, axis=1)
        fused = np.where(pool, fused, -np.inf)
        kmax = int(ks.max())
        ranked, _ = top(fused, kmax)
        hits = np.take_along_axis(rel, ranked, axis=1) & (np.arange(kmax)[None, :] < ks[:, None])
        n_rel = rel.sum(axis=1)
        dcg = (hits * discount[:kmax]).sum(axis=1)
        ideal = np.array([discount[:min(int(r), int(k))].sum() for r, k in zip(n_rel, ks, strict=True)])
        first = np.where(hits.any(axis=1), hits.argmax(axis=1) + 1, 0)
        results[s.version] = {
            "ndcg_at_k": float(np.mean(np.where(ideal > 0, dcg / np.where(ideal > 0, ideal, 1), 0))),
            "recall_at_k": float(np.mean(hits.sum(axis=1) / np.maximum(n_rel, 1))),
            "precision_at_k": float(np.mean(hits.sum(axis=1) / ks)),
            "mrr": float(np.mean(np.where(first > 0, 1 / np.maximum(first, 1), 0))),
            "pooled": int(pool.sum())}
    t_end = time.perf_counter()
    return {"wall_s": t_end - t0, "read_s": t_load - t0, "compute_s": t_end - t_load, "strategies": results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--strategies", default="hybrid-v1,vector-v1,keyword-v1,bm25-v1,hybrid-bm25-v1,rrf-v1,"
                                                "vector-exact-v1,hybrid-bm25-exact-v1")
    args = parser.parse_args(argv)
    print(json.dumps(floor(args.dataset, args.strategies.split(","))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
