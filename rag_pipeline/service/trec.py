"""TREC run files and qrels for the front ends: each argument resolved once (a dataset by the one resolver), then
:mod:`rag_pipeline.evaluation.trec` does the work."""

from __future__ import annotations

import os

import sqlalchemy as sa

from rag_pipeline.contracts.trec import TrecExport, TrecRunImport
from rag_pipeline.evaluation.datasets.resolve import resolve_dataset
from rag_pipeline.evaluation.trec import export, qrels, run_import
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base


def import_run(engine: sa.Engine, path: str | os.PathLike, *, strategy: str, dataset: str,
               knowledge_base: str | None = None, version: str | None = None) -> TrecRunImport:
    """Store a run file as a run of ``strategy`` on ``dataset`` (a stored version id, a dataset file, or the
    latest stored version of a name on ``knowledge_base``; ``version`` a hash prefix)."""
    ref = resolve_dataset(engine, dataset, knowledge_base=knowledge_base, version=version)
    return run_import.import_run(engine, path, strategy, ref)


def export_run(engine: sa.Engine, run_id: str, path: str | os.PathLike, tag: str | None = None,
               scores: str = "stored") -> TrecExport:
    return export.export_run(engine, run_id, path, tag, scores)


def export_dataset(engine: sa.Engine, dataset: str, qrels_path: str | os.PathLike, topics_path: str | os.PathLike,
                   *, knowledge_base: str | None = None, version: str | None = None) -> TrecExport:
    ref = resolve_dataset(engine, dataset, knowledge_base=knowledge_base, version=version)
    return export.export_dataset(engine, ref.dataset, ref.kb.id, qrels_path, topics_path)


def import_dataset(engine: sa.Engine, qrels_path: str | os.PathLike, topics_path: str | os.PathLike, *, name: str,
                   knowledge_base: str, k: int = 10) -> tuple[str, str, int]:
    """Store qrels + topics as a dataset version; returns its name, id and case count."""
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
    dataset, dataset_id = qrels.import_dataset(engine, qrels_path, topics_path, name=name, kb=kb, default_k=k)
    return dataset.name, dataset_id, len(dataset.cases)
