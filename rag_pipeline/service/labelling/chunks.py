"""Finding chunk ids to label (``rag-pipeline chunks``, ``GET …/chunks``) with the retrieval legs."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from rag_pipeline.contracts.catalog import ChunkList, FoundChunk
from rag_pipeline.knowledge_base import attached, catalogue, chunk_lookup
from rag_pipeline.knowledge_base.chunk_lookup import ChunkRow
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL, get_embedder
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError, KnowledgeBaseRef, resolve_knowledge_base
from rag_pipeline.retrieval.attached_search import search_batch
from rag_pipeline.retrieval.search import hybrid_search_batch
from rag_pipeline.retrieval.strategies import Strategy

MAX_LIMIT = 1000
_POOL = 200  # candidates per leg when a search is narrowed to one document


def _found(rank: int, c: ChunkRow, search: str | None, matched: tuple[str, ...] = (),
           score: float | None = None) -> FoundChunk:
    return FoundChunk(rank=rank, chunk_id=c.chunk_id, document_id=c.document_id, document_name=c.document_name,
                      ordinal=c.ordinal, char_start=c.char_start, char_end=c.char_end, matched=list(matched),
                      score=None if score is None else round(score, 6),
                      snippet=chunk_lookup.snippet(c.text, [search] if search else []), text=c.text)


def search_strategy(models: Sequence[str], candidates: int) -> Strategy:
    """The chunk finder's fused search: BM25 + the KB's vectors (USE when it has them), reciprocal rank fusion."""
    model = DEFAULT_MODEL if DEFAULT_MODEL in models else (models[0] if models else DEFAULT_MODEL)
    return Strategy("chunk-search", embedding_model=model, vector_candidate_k=candidates if models else 0,
                    keyword_candidate_k=candidates, keyword_scorer="bm25", fusion="rrf", vector_weight=1.0,
                    keyword_weight=1.0, ef_search=max(100, candidates), final_top_k=candidates)


def find_chunks(engine: sa.Engine, knowledge_base: str, *, search: str | None = None, document: str | None = None,
                limit: int = 20) -> ChunkList:
    """The searchable chunks of a knowledge base: all, or those matching ``search``; ``document`` narrows."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    search = (search or "").strip() or None
    with engine.begin() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
        found = attached.load(conn, kb)
        if found is not None:
            return _attached_chunks(conn, found, search, document, limit)
        if catalogue.is_external(kb):
            return _catalogue_chunks(conn, kb, search, document, limit)
        doc_id = doc_name = None
        if document:
            doc_id, doc_name = chunk_lookup.resolve_document(conn, kb.id, kb.name, document)
        if search is None:
            rows, total = chunk_lookup.list_chunks(conn, kb.id, document_id=doc_id, limit=limit)
            return ChunkList(knowledge_base=kb.name, knowledge_base_id=str(kb.id), search=None, document=doc_name,
                             total=total, chunks=[_found(i, r, None) for i, r in enumerate(rows, start=1)])
        phrase = chunk_lookup.phrase_matches(conn, kb.id, search, document_id=doc_id, limit=MAX_LIMIT)
        pool = min(MAX_LIMIT, max(limit * 3, _POOL if doc_id else 30))
        strategy = search_strategy(chunk_lookup.embedding_models(conn, kb.id), pool)
        [trace] = hybrid_search_batch(conn, knowledge_base_id=kb.id, queries=[search], strategy=strategy)
        details = chunk_lookup.chunks_by_ids(conn, [c.chunk_id for c in trace.candidates])
    fused = {c.chunk_id: c for c in trace.candidates if doc_id is None or c.document_id == doc_id}
    return _merged(kb.name, str(kb.id), search, doc_name, phrase, fused, details, limit)


def _merged(kb_name: str, kb_id: str, search: str, doc_name: str | None, phrase: Sequence[ChunkRow],
            fused: dict, details: dict[str, ChunkRow], limit: int) -> ChunkList:
    """The literal matches first (those the fused search also found in its order), then the fused search's."""
    literal = {r.chunk_id for r in phrase}
    order = [r.chunk_id for r in sorted(phrase, key=lambda r: (r.chunk_id not in fused,
                                                               fused[r.chunk_id].rank if r.chunk_id in fused else 0))]
    order += [cid for cid in fused if cid not in literal]
    by_id = {**details, **{r.chunk_id: r for r in phrase}}
    found = []
    for rank, cid in enumerate(order[:limit], start=1):
        c = fused.get(cid)
        matched = (("phrase",) if cid in literal else ()) + (
            (("keyword",) if c.keyword_rank else ()) + (("vector",) if c.vector_rank else ()) if c else ())
        found.append(_found(rank, by_id[cid], search, matched, c.final_score if c else None))
    return ChunkList(knowledge_base=kb_name, knowledge_base_id=kb_id, search=search, document=doc_name,
                     total=len(order), chunks=found)


def _attached_chunks(conn: sa.Connection, found: attached.AttachedKnowledgeBase, search: str | None,
                     document: str | None, limit: int) -> ChunkList:
    """:func:`find_chunks` on an attached knowledge base: substring matches and the SQL legs on the user's table
    (ts_rank_cd keyword leg, the mapped vectors), reciprocal rank fusion; ids as runs store them."""
    kb, m = found.kb, found.mapping
    if document:
        raise KnowledgeBaseError(f"knowledge base {kb.name!r} is attached (your own tables): chunks are listed or "
                                 "searched without --document")
    if search is None:
        rows, total = attached.list_chunks(conn, found, limit=limit)
        return ChunkList(knowledge_base=kb.name, knowledge_base_id=str(kb.id), search=None, document=None,
                         total=total, chunks=[_found(i, r, None) for i, r in enumerate(rows, start=1)])
    phrase, _ = attached.list_chunks(conn, found, limit=MAX_LIMIT, search=search)
    pool = min(MAX_LIMIT, max(limit * 3, 30))
    vector = m.embedding is not None
    strategy = Strategy("chunk-search", embedding_model=m.embedding_model, vector_candidate_k=pool if vector else 0,
                        keyword_candidate_k=pool, keyword_scorer="ts_rank_cd", fusion="rrf", vector_weight=1.0,
                        keyword_weight=1.0, final_top_k=pool)
    vectors = get_embedder(m.embedding_model).embed([search]) if vector else None
    with attached.read_only(found) as user:
        [trace] = search_batch(user, found, [search], strategy, [pool], vectors)
    ids = attached.remember(conn, kb, [c.chunk_id for c in trace.candidates])
    fused = {ids[c.chunk_id]: c._replace(chunk_id=ids[c.chunk_id]) for c in trace.candidates}
    return _merged(kb.name, str(kb.id), search, None, phrase, fused, attached.chunk_rows(conn, found, list(fused)),
                   limit)


def _catalogue_chunks(conn: sa.Connection, kb: KnowledgeBaseRef, search: str | None, document: str | None,
                      limit: int) -> ChunkList:
    """:func:`find_chunks` on an external knowledge base: its catalogue in original-id order, or the catalogued
    chunks whose title or text contains ``search`` (case-insensitive; there are no retrieval legs of ours to run);
    ids as runs store them."""
    if document:
        raise KnowledgeBaseError(f"knowledge base {kb.name!r} is external (a chunk catalogue): chunks are listed or "
                                 "searched without --document")
    rows, total = catalogue.list_chunks(conn, kb, limit=limit, search=search)
    matched = ("phrase",) if search else ()
    return ChunkList(knowledge_base=kb.name, knowledge_base_id=str(kb.id), search=search, document=None,
                     total=total, chunks=[_found(i, r, search, matched) for i, r in enumerate(rows, start=1)])
