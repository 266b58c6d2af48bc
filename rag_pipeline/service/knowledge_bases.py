"""Knowledge-base operations: ingest a folder, import a BEIR collection, counts, the listing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa

from rag_pipeline.contracts.catalog import KnowledgeBaseInfo
from rag_pipeline.contracts.knowledge_base import BeirImportResult, IngestResult, KnowledgeBaseStats
from rag_pipeline.evaluation.queries import knowledge_base as kb_queries
from rag_pipeline.evaluation.queries.knowledge_base import snapshot
from rag_pipeline.knowledge_base import beir, lifecycle, versions
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL
from rag_pipeline.knowledge_base.ingestion import Progress, ingest_documents
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.knowledge_base.queries.documents import knowledge_base_names
from rag_pipeline.knowledge_base.sources import read_folder
from rag_pipeline.retrieval.strategies import Strategy, load_registry
from rag_pipeline.service.applicability import split_runnable
from rag_pipeline.storage.files import write_atomic
from rag_pipeline.storage.names import DATASET, KNOWLEDGE_BASE, check_name

DEFAULT_CHUNK_SIZE = 500
DEFAULT_CHUNK_OVERLAP = 80


def ingest(engine: sa.Engine, folder: str | Path, knowledge_base: str, *, text_search: str = "simple",
           chunk_size: int = DEFAULT_CHUNK_SIZE, chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
           models: Sequence[str] = (DEFAULT_MODEL,), rechunk: bool = False,
           progress: Progress | None = None) -> IngestResult:
    """Bring ``knowledge_base`` in line with the documents of ``folder``, all checked before anything is written."""
    check_name(KNOWLEDGE_BASE, knowledge_base)
    docs = read_folder(folder)
    result = ingest_documents(engine, docs, knowledge_base, text_search=text_search, chunk_size=chunk_size or None,
                              chunk_overlap=chunk_overlap, models=models, rechunk=rechunk, progress=progress)
    result.warnings.extend(docs.warnings())
    return result


def import_beir(engine: sa.Engine, folder: str | Path, knowledge_base: str, dataset_out: str | Path, *,
                split: str = "test", models: Sequence[str] = (DEFAULT_MODEL,), text_search: str = "english",
                k: int = 10, progress: Progress | None = None) -> BeirImportResult:
    """Ingest a BEIR corpus (a chunk per document) and write its queries + qrels as a dataset file."""
    check_name(KNOWLEDGE_BASE, knowledge_base)
    out = Path(dataset_out)
    check_name(DATASET, out.stem)  # the dataset written is named by its file stem
    plan = beir.plan_import(folder, knowledge_base, split=split, k=k)
    out.parent.mkdir(parents=True, exist_ok=True)  # an unwritable destination fails before the ingestion
    result = beir.ingest_plan(engine, plan, knowledge_base, models=models, text_search=text_search, progress=progress)
    dataset = plan.dataset(knowledge_base)
    write_atomic(out, json.dumps(dataset, ensure_ascii=False, indent=1) + "\n")
    m = dataset["metadata"]
    counts = [f"{len(m[key])} {what}" for key, what in (
        ("skipped_queries", "query(ies)"), ("skipped_documents", "document(s) without text"),
        ("dropped_labels", "judgement(s) of skipped documents")) if m[key]]
    skipped = [f"skipped {', '.join(counts)}: listed in the output and in the metadata of {out}"] if counts else []
    reported = ("grades", "skipped_queries", "skipped_documents", "dropped_labels", "zero_grades_omitted")
    return BeirImportResult(**{**result.model_dump(), "warnings": [*result.warnings, *skipped]}, dataset_out=str(out),
                            cases=len(dataset["cases"]), **{key: m[key] for key in reported})


def knowledge_base_stats(engine: sa.Engine, knowledge_base: str) -> KnowledgeBaseStats:
    """Counts of a knowledge base (name or id) and its content ``version``, read in one snapshot."""
    with engine.connect() as conn, conn.begin():
        snapshot(conn, read_only=False)
        stats = lifecycle.knowledge_base_stats(conn, knowledge_base)
        return KnowledgeBaseStats(**stats, version=versions.content_version(conn, stats["knowledge_base_id"]).version)


def _describe(conn: sa.Connection, name_or_id: str, registry: dict[str, Strategy]) -> KnowledgeBaseInfo:
    stats = lifecycle.knowledge_base_stats(conn, name_or_id)
    kb = resolve_knowledge_base(conn, name_or_id)
    ok, skipped = split_runnable(conn, kb, registry)
    activity = kb_queries.activity(conn, kb)
    return KnowledgeBaseInfo(
        id=str(kb.id), name=kb.name, text_search=kb.text_search, chunk_size=kb.chunk_size,
        chunk_overlap=kb.chunk_overlap, documents=stats["documents"],
        searchable_documents=stats["searchable_documents"], current_chunks=stats["current_chunks"],
        replaced_chunks=stats["replaced_chunks"], embeddings=stats["embeddings"],
        models=sorted(stats["embeddings"]), avg_chunk_tokens=stats["avg_chunk_tokens"],
        applicable_strategies=ok, inapplicable_strategies=skipped,
        datasets=activity.datasets, runs=activity.runs,
        last_run_at=activity.last_run_at.isoformat() if activity.last_run_at else None, kind=kb.kind,
        catalogued_chunks=stats["catalogued_chunks"])


def list_knowledge_bases(engine: sa.Engine) -> list[KnowledgeBaseInfo]:
    """Every knowledge base by name: counts, text mode, the strategies it can run, its datasets and runs."""
    registry = load_registry()
    with engine.connect() as conn:
        names = knowledge_base_names(conn)
        return [_describe(conn, name, registry) for name in names]


def describe_knowledge_base(engine: sa.Engine, name_or_id: str) -> KnowledgeBaseInfo:
    """One knowledge base (name or id) as :func:`list_knowledge_bases` shows it."""
    with engine.connect() as conn:
        return _describe(conn, name_or_id, load_registry())
