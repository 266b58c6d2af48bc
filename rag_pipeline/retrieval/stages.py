"""The optional stages after the two legs, complete pools and the rerank stage (docs/design.md §3.2).

The rerank stage re-scores the first stage's top ``top_n`` (:func:`rerank_scores`) and orders by ``final desc,
first-stage rank asc``; every candidate keeps its ``first_stage_rank`` and ``first_stage_score``."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

import numpy as np
import sqlalchemy as sa

from rag_pipeline.knowledge_base.embedding import get_embedder
from rag_pipeline.retrieval import fusion
from rag_pipeline.retrieval import sql as retrieval_sql
from rag_pipeline.retrieval.dense_index import DenseIndex
from rag_pipeline.retrieval.strategies import Rerank, Strategy, StrategyError
from rag_pipeline.retrieval.trace import Candidate, LegHit, RetrievalError, RetrievalTrace
from rag_pipeline.storage.vector_params import VectorArray


def uuid_literal(ids) -> str:
    return "{" + ",".join(str(uuid.UUID(str(i))) for i in ids) + "}"


def stored_vector_scores(conn: sa.Connection, kb_id, model: str, query_vectors: np.ndarray,
                         chunk_ids: Sequence[Sequence[str]]) -> list[dict[str, float]]:
    """Per question, ``{chunk id: 1 - cosine distance}`` between the question vector and the chunk's stored
    vector of ``model``, for the listed chunks that have one."""
    out: list[dict[str, float]] = [{} for _ in chunk_ids]
    wanted = [i for i, ids in enumerate(chunk_ids) if ids]
    if not wanted:
        return out
    dimension = retrieval_sql.model_dimension(conn, model)
    if dimension is None:
        raise RetrievalError(f"embedding model {model!r} is not registered in this database")
    vectors = np.asarray(query_vectors, dtype=np.float32)
    rows = retrieval_sql.stored_vector_scores(conn, dimension, {
        "kb": kb_id, "model": model, "query_vectors": VectorArray(vectors[wanted]),
        "chunk_ids": [uuid_literal(chunk_ids[i]) for i in wanted]})
    for row in rows:
        out[wanted[row.query_index - 1]][str(row.chunk_id)] = float(row.score)
    return out


def rerank_scores(conn: sa.Connection, kb, version: str, rerank: Rerank, queries: Sequence[str],
                  chunk_ids: Sequence[Sequence[str]]) -> list[dict[str, float]]:
    """Per question, ``{chunk id: rerank score}`` for the listed chunks under the rerank stage of strategy
    ``version``."""
    if rerank.method == "embedding":
        vectors = get_embedder(rerank.model).embed(list(queries))
        scores = stored_vector_scores(conn, kb.id, rerank.model, vectors, chunk_ids)
        for ids, found in zip(chunk_ids, scores, strict=True):
            missing = [i for i in ids if i not in found]
            if missing:
                raise RetrievalError(
                    f"strategy {version}: {len(missing)} pooled chunk(s) (e.g. {missing[0]}) have no "
                    f"{rerank.model!r} vector for the rerank stage; ingest knowledge base {kb.name!r} with "
                    f"--models {rerank.model}")
        return scores
    from rag_pipeline.retrieval.cross_encoder import load_cross_encoder  # noqa: PLC0415 - torch only when used

    model = load_cross_encoder(rerank.model, version)
    every = sorted({i for ids in chunk_ids for i in ids})
    texts = retrieval_sql.chunk_texts(conn, uuid_literal(every))
    pairs = [(q, texts[i]) for q, ids in zip(queries, chunk_ids, strict=True) for i in ids]
    flat = iter(model.score(pairs, rerank.batch_size))
    return [{i: next(flat) for i in ids} for ids in chunk_ids]


def rerank_trace(trace: RetrievalTrace, scores: dict[str, float], rerank: Rerank, limit: int) -> RetrievalTrace:
    """Re-order one first-stage trace with its re-scored candidates' ``scores`` (see the module docstring)."""
    first = trace.candidates
    n = len(first) if rerank.top_n is None else min(rerank.top_n, len(first))
    head, tail = first[:n], first[n:]
    if not head:
        return trace
    r = np.array([scores[c.chunk_id] for c in head], dtype=float)
    f = np.array([c.final_score for c in head], dtype=float)
    final = (rerank.weight * fusion.normalize(r, rerank.normalization)
             + (1.0 - rerank.weight) * fusion.normalize(f, rerank.normalization))
    order = np.lexsort((np.arange(n), -final))  # final desc, then first-stage rank asc
    out: list[Candidate] = []
    for index in order:
        c = head[index]
        out.append(c._replace(rank=len(out) + 1, rerank_score=float(r[index]),
                                       final_score=float(final[index]), first_stage_rank=c.rank,
                                       first_stage_score=c.final_score))
    for c in tail:
        out.append(c._replace(rank=len(out) + 1, first_stage_rank=c.rank, first_stage_score=c.final_score))
    return RetrievalTrace(trace.question, out, out[:limit], trace.keyword_targets)


def rerank_batch(conn: sa.Connection, kb, version: str, rerank: Rerank, traces: list[RetrievalTrace],
                 limits: Sequence[int]) -> list[RetrievalTrace]:
    """Apply strategy ``version``'s ``rerank`` stage to every trace of a batch (one scoring call for the batch)."""
    ids = [[c.chunk_id for c in t.candidates[:rerank.top_n]] for t in traces]
    scores = rerank_scores(conn, kb, version, rerank, [t.question for t in traces], ids)
    return [rerank_trace(t, s, rerank, limit) for t, s, limit in zip(traces, scores, limits, strict=True)]


def completion_targets(vector_hits, targets) -> list[list[str]]:
    """The keyword leg's targets under ``complete_pool``: the case's own targets plus the vector leg's chunks."""
    own = targets if targets is not None else [[] for _ in vector_hits]
    return [sorted({*map(str, t), *(h.chunk_id for h in hits)}) for t, hits in zip(own, vector_hits, strict=True)]


def split_keyword_targets(below: list[dict], targets, vector_hits) -> tuple[list[dict], list[dict]]:
    """The keyword leg's below-top-N rows → (completed keyword scores of the vector leg's chunks, the case
    targets' rows for the diagnosis). A chunk the leg did not score shares no term with the question: 0."""
    completed, diagnosis = [], []
    for i, found in enumerate(below):
        pooled = {h.chunk_id for h in vector_hits[i]}
        completed.append({cid: (v["keyword_score"] or 0.0) for cid, v in found.items() if cid in pooled})
        own = {str(t) for t in targets[i]} if targets is not None else set()
        diagnosis.append({cid: v for cid, v in found.items() if cid in own})
    return completed, diagnosis


def complete_vector(conn: sa.Connection, kb_id, strategy: Strategy, vectors: np.ndarray, vector_hits,
                    keyword_hits, index: DenseIndex | None = None) -> list[dict[str, float]]:
    """Vector scores of the keyword leg's chunks the vector leg did not return (from their stored vectors; with
    ``index``, in memory by the exact leg's own arithmetic)."""
    wanted = [sorted({h.chunk_id for h in k_hits} - {h.chunk_id for h in v_hits})
              for v_hits, k_hits in zip(vector_hits, keyword_hits, strict=True)]
    if index is not None:
        return index.chunk_scores(vectors, wanted)
    return stored_vector_scores(conn, kb_id, strategy.embedding_model, vectors, wanted)


def first_stage_ranks(strategy: Strategy, candidates: Sequence[Mapping]) -> dict[str, int]:
    """The first-stage rank of each stored candidate of one case (mappings with ``chunk_id`` and the four leg
    fields): the stored leg scores fused and ordered exactly as :func:`fuse_pool` did in the run."""
    if not candidates:
        return {}
    ids = [str(c["chunk_id"]) for c in candidates]

    def column(name: str) -> np.ndarray:
        return np.array([np.nan if c[name] is None else float(c[name]) for c in candidates], dtype=float)

    vs = column("vector_score")
    final = fusion.fuse(strategy, vs, column("keyword_score"), column("vector_rank"), column("keyword_rank"))
    return {ids[i]: rank for rank, i in enumerate(fusion.order(final, vs, np.array(ids)), start=1)}


def stored_strategy(version: str, params: Mapping | None) -> Strategy | None:
    """The strategy a run stored (its ``strategy_params``), or None when they no longer make a valid one."""
    try:
        return Strategy(version=version, **{k: v for k, v in (params or {}).items() if k in Strategy.model_fields})
    except (StrategyError, TypeError):
        return None


def fuse_pool(question: str, vector: list[LegHit], keyword: list[LegHit], strategy: Strategy, limit: int,
              completed: dict[str, dict[str, float]] | None = None) -> RetrievalTrace:
    """One question's :func:`fuse_pools`."""
    return fuse_pools([question], [vector], [keyword], strategy, [limit], None if completed is None else [completed])[0]


_LEG_COLUMNS = ("vector_score", "vector_rank", "keyword_score", "keyword_rank")


def fuse_pools(questions: Sequence[str], vector: Sequence[list[LegHit]], keyword: Sequence[list[LegHit]],
               strategy: Strategy, limits: Sequence[int],
               completed: Sequence[dict[str, dict[str, float]]] | None = None) -> list[RetrievalTrace]:
    """Per question, merge the two legs' hits (each best first) by chunk id, fuse, order and rank them into a trace
    (pure). ``completed`` (``complete_pool``) gives leg scores for pooled chunks a leg did not return (no leg rank).
    A pool's columns are lists in pool order (vector hits first, then the keyword leg's others; None where a leg
    has no score or rank); the batch is fused at once as float arrays (None → NaN), padded and masked: the same
    final scores as each pool alone (:mod:`fusion`'s batch functions)."""
    pools = [_pool(v, k, None if completed is None else completed[i])
             for i, (v, k) in enumerate(zip(vector, keyword, strict=True))]
    width = max((len(hits) for hits, _ in pools), default=0)
    traces = [RetrievalTrace(q, [], []) for q in questions]
    if width == 0:
        return traces
    grid = {name: np.full((len(pools), width), np.nan) for name in _LEG_COLUMNS}
    mask = np.zeros((len(pools), width), dtype=bool)
    for row, (hits, columns) in enumerate(pools):
        mask[row, :len(hits)] = True
        for name in _LEG_COLUMNS:
            grid[name][row, :len(hits)] = np.array(columns[name], dtype=float)
    final = fusion.fuse_batch(strategy, grid["vector_score"], grid["keyword_score"], grid["vector_rank"],
                              grid["keyword_rank"], mask)
    version = strategy.version
    for row, (hits, columns) in enumerate(pools):
        n = len(hits)
        if n == 0:
            continue
        finals = final[row, :n]
        order = fusion.order(finals, grid["vector_score"][row, :n], np.array([h.chunk_id for h in hits]))
        v_scores, v_ranks = columns["vector_score"], columns["vector_rank"]
        k_scores, k_ranks = columns["keyword_score"], columns["keyword_rank"]
        values = finals.tolist()
        candidates = [
            Candidate(hits[i].chunk_id, hits[i].document_id, hits[i].document_name, rank, v_scores[i], v_ranks[i],
                      k_scores[i], k_ranks[i], None, values[i], version)
            for rank, i in enumerate(order.tolist(), start=1)]
        traces[row] = RetrievalTrace(questions[row], candidates, candidates[:limits[row]])
    return traces


def _pool(vector: list[LegHit], keyword: list[LegHit],
          completed: dict[str, dict[str, float]] | None) -> tuple[list[LegHit], dict[str, list]]:
    """One question's merged hits (vector hits first, then the keyword leg's others) and its leg columns."""
    hits = list(vector)
    slot = {h.chunk_id: i for i, h in enumerate(hits)}
    for h in keyword:
        if h.chunk_id not in slot:
            slot[h.chunk_id] = len(hits)
            hits.append(h)
    n = len(hits)
    columns: dict[str, list] = {name: [None] * n for name in _LEG_COLUMNS}
    for leg, leg_hits in (("vector", vector), ("keyword", keyword)):
        scores, ranks = columns[f"{leg}_score"], columns[f"{leg}_rank"]
        for rank, hit in enumerate(leg_hits, start=1):
            scores[slot[hit.chunk_id]], ranks[slot[hit.chunk_id]] = hit.score, rank
    for leg, leg_scores in (completed or {}).items():
        scores, ranks = columns[f"{leg}_score"], columns[f"{leg}_rank"]
        for chunk_id, score in leg_scores.items():
            i = slot.get(chunk_id)
            if i is not None and ranks[i] is None:
                scores[i] = score
    return hits, columns


def preflight_rerank(conn: sa.Connection, kb, strategy: Strategy) -> None:
    """Fail before anything is written when the rerank stage cannot run on this knowledge base: no stored
    vectors of the embedding model, or a cross-encoder directory that is missing or not a cross-encoder."""
    rerank = strategy.rerank
    if rerank is None:
        return
    if rerank.method == "embedding":
        if not retrieval_sql.has_embeddings(conn, kb.id, rerank.model):
            raise RetrievalError(
                f"strategy {strategy.version}: field 'rerank.model': knowledge base {kb.name!r} has no embeddings "
                f"of model {rerank.model!r}; ingest it with --models {rerank.model} or pick another strategy")
        get_embedder(rerank.model)
        return
    from rag_pipeline.retrieval.cross_encoder import load_cross_encoder  # noqa: PLC0415 - torch only when used

    load_cross_encoder(rerank.model, strategy.version)
