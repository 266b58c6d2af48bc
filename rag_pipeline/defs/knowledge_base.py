"""Asset group ``knowledge_base``: ingest a folder of documents into a knowledge base (the CLI's operation)."""


import dagster as dg

from rag_pipeline.defs.instance import POOL
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL
from rag_pipeline.service import knowledge_bases
from rag_pipeline.settings import project_root


class KnowledgeBaseConfig(dg.Config):
    source_dir: str = str(project_root() / "demo" / "kb")
    knowledge_base: str = "demo"
    text_search: str = "chinese"
    chunk_size: int = knowledge_bases.DEFAULT_CHUNK_SIZE
    chunk_overlap: int = knowledge_bases.DEFAULT_CHUNK_OVERLAP
    models: list[str] = [DEFAULT_MODEL]
    rechunk: bool = False  # another chunk_size/overlap re-chunks the KB in place (replaced chunks kept for fix-labels)


@dg.asset(group_name="knowledge_base", kinds={"postgres", "python"}, pool=POOL)
def knowledge_base(context: dg.AssetExecutionContext, config: KnowledgeBaseConfig, rag_db: RagDatabase):
    """Documents, chunks, embeddings (one row per chunk per model), tsvectors and BM25 statistics.

    Reads ``source_dir`` (.md/.txt/.html/.jsonl), chunks sentence-aware with exact spans, embeds in batches
    and writes everything with COPY in one transaction. Re-materialising an unchanged folder changes nothing;
    a changed document's replaced chunks are kept as history (``is_current = false``). ``rechunk: true`` with another
    chunk size/overlap re-chunks every document in place (``rag-pipeline fix-labels`` then carries datasets over).
    """
    engine = rag_db.engine()
    last = {"pct": -1}

    def progress(stage: str, done: int, total: int) -> None:
        pct = int(100 * done / max(total, 1))
        if pct // 10 != last["pct"] // 10:
            last["pct"] = pct
            context.log.info(f"{stage}: {done}/{total} ({pct}%)")

    result = knowledge_bases.ingest(engine, config.source_dir, config.knowledge_base, text_search=config.text_search,
                                    chunk_size=config.chunk_size, chunk_overlap=config.chunk_overlap,
                                    models=config.models, rechunk=config.rechunk, progress=progress)
    context.log.info(f"read {result.documents_seen} documents from {config.source_dir}")
    for warning in result.warnings:
        context.log.warning(warning)
    stats = knowledge_bases.knowledge_base_stats(engine, config.knowledge_base)
    return dg.MaterializeResult(metadata={
        "knowledge_base": config.knowledge_base,
        "documents_new": result.documents_new,
        "documents_changed": result.documents_changed,
        "documents_rechunked": result.documents_rechunked,
        "documents_unchanged": result.documents_unchanged,
        "documents_removed": result.documents_removed,
        "chunks_inserted": result.chunks_inserted,
        "chunks_replaced": result.chunks_replaced,
        "current_chunks": stats["current_chunks"],
        "embeddings": dg.MetadataValue.json(stats["embeddings"]),
        "seconds": round(result.timings.get("total_s", 0.0), 3),
    })


ingest_knowledge_base_job = dg.define_asset_job("ingest_knowledge_base", selection=[knowledge_base])
