"""Asset group ``knowledge_base``: ingest a folder, partitioned by name, versioned by its content."""


import dagster as dg

from rag_pipeline.defs.instance import POOL
from rag_pipeline.defs.lineage import dataset_observations
from rag_pipeline.defs.partitions import knowledge_base_partitions
from rag_pipeline.defs.resources import RagDatabase
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL
from rag_pipeline.service import knowledge_bases, lineage


class KnowledgeBaseConfig(dg.Config):
    """How to ingest the partition's knowledge base; the demo job (:mod:`rag_pipeline.defs.demo`) passes the
    demo's folder and settings."""

    source_dir: str
    """Folder of .md/.txt/.html/.jsonl documents; the knowledge base is the partition's name."""
    text_search: str = "simple"
    """Keyword text mode of a new knowledge base (as ``rag-pipeline ingest``): simple, english, chinese or mixed."""
    chunk_size: int = knowledge_bases.DEFAULT_CHUNK_SIZE
    chunk_overlap: int = knowledge_bases.DEFAULT_CHUNK_OVERLAP
    models: list[str] = [DEFAULT_MODEL]
    rechunk: bool = False  # another chunk_size/overlap re-chunks the KB in place (replaced chunks kept for fix-labels)


@dg.asset(group_name="knowledge_base", kinds={"postgres", "python"}, pool=POOL,
          partitions_def=knowledge_base_partitions)
def knowledge_base(context: dg.AssetExecutionContext, config: KnowledgeBaseConfig, rag_db: RagDatabase):
    """Documents, chunks, embeddings (one row per chunk per model), tsvectors and BM25 statistics.

    Reads ``source_dir`` (.md/.txt/.html/.jsonl), chunks sentence-aware with exact spans, embeds in batches
    and writes everything with COPY in one transaction. Re-materialising an unchanged folder changes nothing;
    a changed document's replaced chunks are kept as history (``is_current = false``). ``rechunk: true`` with another
    chunk size/overlap re-chunks every document in place (``rag-pipeline fix-labels`` then carries datasets over)."""
    engine = rag_db.engine()
    name = context.partition_key
    last = {"pct": -1}

    def progress(stage: str, done: int, total: int) -> None:
        pct = int(100 * done / max(total, 1))
        if pct // 10 != last["pct"] // 10:
            last["pct"] = pct
            context.log.info(f"{stage}: {done}/{total} ({pct}%)")

    result = knowledge_bases.ingest(engine, config.source_dir, name, text_search=config.text_search,
                                    chunk_size=config.chunk_size, chunk_overlap=config.chunk_overlap,
                                    models=config.models, rechunk=config.rechunk, progress=progress)
    context.log.info(f"read {result.documents_seen} documents from {config.source_dir}")
    for warning in result.warnings:
        context.log.warning(warning)
    version = lineage.knowledge_base_version(engine, name)
    stats = knowledge_bases.knowledge_base_stats(engine, name)
    context.log.info(f"knowledge base {name}: version {version.short}, {version.searchable_chunks} searchable chunks")
    for event in dataset_observations(context.instance, engine, {name: version}):
        context.instance.report_runless_asset_event(event)  # the evaluations of its datasets: now out of date
    return dg.MaterializeResult(data_version=dg.DataVersion(version.version), metadata={
        "knowledge_base": name,
        "knowledge_base_version": version.version,
        "searchable_chunks": version.searchable_chunks,
        "documents_new": result.documents_new,
        "documents_changed": result.documents_changed,
        "documents_rechunked": result.documents_rechunked,
        "documents_unchanged": result.documents_unchanged,
        "documents_removed": result.documents_removed,
        "chunks_inserted": result.chunks_inserted,
        "chunks_replaced": result.chunks_replaced,
        "current_chunks": stats.current_chunks,
        "embeddings": dg.MetadataValue.json(stats.embeddings),
        "seconds": round(result.timings.get("total_s", 0.0), 3),
    })


ingest_knowledge_base_job = dg.define_asset_job(
    "ingest_knowledge_base", selection=[knowledge_base], partitions_def=knowledge_base_partitions,
    description="Ingest a folder into the knowledge base of the partition (config: source_dir, text_search, ...).")
