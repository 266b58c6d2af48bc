"""The floor of an HNSW strategy's vector leg: its SQL statement alone, on the evaluation's reader connections.

A strategy that reads the HNSW index (``vector_search: hnsw``) cannot be faster, on this machine, than PostgreSQL
walking the index for each question. For every HNSW strategy given: the vector leg's statement
(``retrieval.sql.VECTOR_LEG_SQL`` at the strategy's ``ef_search`` and fetch size, as ``search._vector_leg`` runs
it) for all the dataset's questions, in the evaluation's batches of 64, on ``RAG_EVAL_READERS`` connections at
once; the walk statement the leg runs when the keyword leg's index is in memory (``VECTOR_WALK_SQL``: no
searchability check, no document join); and the bare index walk (the same ``ORDER BY ... LIMIT`` without the
score either). Nothing else: no embedding (the vectors come from ``question_embeddings``, where the
pipeline's runs stored them), no fusion, no write. Prints the questions per second of each, which bounds the
cases per second of any run of that strategy.

``RAG_PGDATA=<scratch> python bench/hnsw_floor.py DATASET.json --strategies hybrid-bm25-v1``
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchutil import machine_line  # noqa: E402

BARE_SQL = """
SELECT q.ord AS query_index, hit.chunk_id
FROM unnest(CAST(:query_vectors AS vector[])) WITH ORDINALITY AS q(query_vector, ord)
CROSS JOIN LATERAL (
    SELECT e.chunk_id FROM chunk_embeddings e
    WHERE e.model = :model AND e.knowledge_base_id = :kb
    ORDER BY e.embedding::vector({dim}) <=> q.query_vector
    LIMIT :k
) AS hit
"""


def floor(dataset_path: Path, versions: list[str], readers: int, batch_size: int = 64) -> list[dict]:
    import numpy as np
    import sqlalchemy as sa

    from rag_pipeline.knowledge_base.embedding import get_embedder
    from rag_pipeline.knowledge_base.question_embeddings import QuestionVectors
    from rag_pipeline.retrieval import sql as retrieval_sql
    from rag_pipeline.retrieval import vector_cut
    from rag_pipeline.retrieval.strategies import MAX_EF_SEARCH, load_registry
    from rag_pipeline.storage.engine import get_engine

    engine = get_engine()
    registry = load_registry()
    data = json.loads(dataset_path.read_text(encoding="utf-8"))
    questions = [c["question"] for c in data["cases"]]
    with engine.connect() as conn:
        kb = conn.execute(sa.text("SELECT id FROM knowledge_bases WHERE name = :n"),
                          {"n": data["knowledge_base"]}).scalar_one()
    out = []
    for version in versions:
        strategy = registry[version]
        if strategy.vector_search != "hnsw" or not strategy.vector_candidate_k:
            raise SystemExit(f"{version} has no HNSW vector leg")
        model = strategy.embedding_model
        vectors = np.asarray(QuestionVectors(engine, get_embedder(model)).vectors(questions), dtype=np.float32)
        with engine.connect() as conn:
            dim = retrieval_sql.model_dimension(conn, model)
        k = vector_cut.fetch_size(strategy.vector_candidate_k)
        ef_search = min(max(strategy.ef_search, k), MAX_EF_SEARCH)
        statements = {"pipeline statement": retrieval_sql.vector_leg_sql(dim),
                      "walk statement": retrieval_sql.vector_walk_sql(dim),
                      "bare index walk": BARE_SQL.format(dim=dim)}
        batches = [vectors[i:i + batch_size] for i in range(0, len(vectors), batch_size)]
        row = {"strategy": version, "questions": len(questions), "readers": readers, "fetch": k,
               "ef_search": ef_search}
        for name, statement in statements.items():
            run = functools.partial(_search, engine, statement, {"kb": kb, "model": model, "k": k}, ef_search)

            best = float("inf")
            for _ in range(2):  # the first pass also warms the index's pages
                t = time.perf_counter()
                with ThreadPoolExecutor(readers) as pool:
                    rows = sum(pool.map(run, batches))
                best = min(best, time.perf_counter() - t)
            row[name] = {"s": round(best, 3), "questions_per_s": round(len(questions) / best, 1), "rows": rows}
        out.append(row)
    return out


def _search(engine, statement: str, params: dict, ef_search: int, batch) -> int:
    """One batch's statement in its own transaction (the HNSW settings are ``SET LOCAL``): the rows returned."""
    import sqlalchemy as sa

    from rag_pipeline.retrieval import sql as retrieval_sql
    from rag_pipeline.storage.engine import driver_connection
    from rag_pipeline.storage.vector_params import VectorArray

    with engine.begin() as conn:
        retrieval_sql.set_vector_settings(conn, ef_search)
        if "%(" in statement:  # the walk statement, in the driver's parameter style
            return len(driver_connection(conn).execute(statement, {**params, "query_vectors": VectorArray(batch)})
                       .fetchall())
        return len(conn.execute(sa.text(statement), {**params, "query_vectors": VectorArray(batch)}).all())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--strategies", default="hybrid-bm25-v1")
    parser.add_argument("--readers", type=int, help="connections at once (default RAG_EVAL_READERS)")
    args = parser.parse_args(argv)
    from rag_pipeline.storage.snapshot_readers import reader_count

    print(machine_line())
    for row in floor(args.dataset, args.strategies.split(","), reader_count(args.readers)):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
