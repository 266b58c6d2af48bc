"""Dataset operations: store a dataset version, check its labels ("why are all metrics 0?"), resolve names."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from rag_pipeline.evaluation.dataset import DatasetError, load_dataset
from rag_pipeline.evaluation.dataset_fields import relevant_ids_of
from rag_pipeline.evaluation.label_check import LabelReport, check_labels
from rag_pipeline.evaluation.persistence import load_stored_dataset, store_dataset
from rag_pipeline.evaluation.runner import relevant_ids_missing
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base


@dataclass(frozen=True)
class StoredDataset:
    """A validated dataset file stored as a dataset version (``retrieval_evaluation_datasets``)."""

    dataset_id: str
    name: str
    version: str
    knowledge_base: str
    path: Path
    cases: int
    relevant_ids: int
    relevant_ids_not_in_kb: int
    k_min: int
    k_max: int


def register_dataset(engine: sa.Engine, path: str | Path, knowledge_base: str | None = None) -> StoredDataset:
    """Validate a dataset file (every problem at once, nothing written if any) and store its version."""
    dataset = load_dataset(path, knowledge_base=knowledge_base)
    with engine.begin() as conn:
        kb = resolve_knowledge_base(conn, dataset.knowledge_base)
        dataset_id = store_dataset(conn, dataset, kb.name)
        missing = relevant_ids_missing(conn, kb.id, dataset)
    ks = [c.k for c in dataset.cases]
    return StoredDataset(str(dataset_id), dataset.name, dataset.content_hash, kb.name, Path(path),
                         len(dataset.cases), sum(len(c.relevant_chunk_ids) for c in dataset.cases), missing,
                         min(ks), max(ks))


@dataclass(frozen=True)
class DatasetCheck:
    """The label report of a dataset file; ``note`` when the file was read leniently (malformed ids)."""

    report: LabelReport
    note: str | None = None


def check_dataset(engine: sa.Engine, path: str | Path, knowledge_base: str | None = None) -> DatasetCheck:
    """Classify every relevant id of a dataset file against its knowledge base (seed §8).

    A file whose only problems are malformed ids is still checked (those ids get status ``not_a_uuid``);
    any other problem raises :class:`DatasetError`."""
    path = Path(path)
    note = None
    try:
        dataset = load_dataset(path, knowledge_base=knowledge_base)
        cases, kb = list(dataset.cases), dataset.knowledge_base
    except DatasetError as exc:
        cases, file_kb = _lenient_cases(path, exc)
        kb = knowledge_base or file_kb
        if not kb:
            raise
        note = "the dataset has malformed ids (reported as not_a_uuid below); fix them before evaluating"
    with engine.connect() as conn:
        return DatasetCheck(check_labels(conn, kb, cases), note)


def check_stored_dataset(engine: sa.Engine, dataset_id: str) -> LabelReport:
    """The label report of a stored dataset version."""
    with engine.connect() as conn:
        dataset = load_stored_dataset(conn, dataset_id)
        return check_labels(conn, dataset.knowledge_base, dataset.cases)


def _lenient_cases(path: Path, error: DatasetError) -> tuple[list[dict], str | None]:
    """The cases of a file whose only problems are malformed relevant ids (else re-raise ``error``)."""
    if not error.problems or any(not (p.field or "").startswith(("relevant_chunk_ids[", "relevant_chunk_ids."))
                                 or "not a UUID" not in p.message for p in error.problems):
        raise error
    data = json.loads(path.read_text(encoding="utf-8-sig"))
    items = data["cases"] if isinstance(data, dict) else data
    kb = data.get("knowledge_base") if isinstance(data, dict) else None
    return [{"case_id": c["case_id"], "relevant_chunk_ids": relevant_ids_of(c["relevant_chunk_ids"])}
            for c in items], kb


def resolve_dataset(name_or_file: str, knowledge_base: str | None = None) -> tuple[str, str | None]:
    """A dataset argument: a stored dataset's name (or a partition's dataset key), or a dataset file —
    validated, then its own name and knowledge base are used. Returns ``(name, knowledge_base)``."""
    if Path(name_or_file).is_file():
        dataset = load_dataset(name_or_file, knowledge_base=knowledge_base)
        return dataset.name, dataset.knowledge_base
    return name_or_file, knowledge_base
