"""The one reading of a dataset argument: a stored version id, a dataset file (``<name>.json`` of the datasets
folder too, the demo's), or the latest stored version of a name; its knowledge base resolved with it, once."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import sqlalchemy as sa

from rag_pipeline.contracts.errors import NotFoundError
from rag_pipeline.evaluation.datasets import external_labels, queries
from rag_pipeline.evaluation.datasets.load import Dataset, load_dataset
from rag_pipeline.evaluation.queries import trec as trec_queries
from rag_pipeline.evaluation.runs.results import load_stored_dataset
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError, KnowledgeBaseRef, resolve_knowledge_base
from rag_pipeline.settings import datasets_dir
from rag_pipeline.storage.ids import as_uuid
from rag_pipeline.storage.names import show_name


class DatasetNotFoundError(NotFoundError, LookupError):
    """No stored dataset (version) of that name in the knowledge base; the message lists the known ones."""


@dataclass(frozen=True)
class DatasetRef:
    """A resolved dataset argument: the validated dataset, its knowledge base, its stored version id (None: a file
    not stored yet)."""

    dataset: Dataset
    kb: KnowledgeBaseRef
    dataset_id: str | None = None


def _stored(conn: sa.Connection, dataset_id: str | uuid.UUID) -> tuple[Dataset, str]:
    try:
        return load_stored_dataset(conn, dataset_id), str(dataset_id)
    except LookupError:
        raise DatasetNotFoundError(f"no stored dataset version {dataset_id}") from None


def stored_version(conn: sa.Connection, kb: KnowledgeBaseRef, name: str, version: str | None = None) -> sa.Row:
    """The latest stored version of ``name`` on ``kb``, or the one whose hash starts with ``version``: its
    ``id, name, content_hash, case_count``."""
    prefix = (version or "").strip().lower()
    if version is not None and (len(prefix) < 4 or not all(c in "0123456789abcdef" for c in prefix)):
        raise DatasetNotFoundError(f"dataset version {show_name(version)} is not a hash prefix of at least 4 hex "
                                   "digits")
    rows = queries.versions_with_prefix(conn, kb.name, name, prefix)
    if not rows:
        known = sorted({r.name for r in queries.latest_versions(conn, kb.name)})
        what = f"version {prefix} of dataset" if prefix else "dataset"
        raise DatasetNotFoundError(f"no {what} {show_name(name)} in knowledge base {kb.name!r}; known: "
                                   f"{', '.join(known) if known else '(none — upload one first)'}")
    return rows[0]


def _connect(engine: sa.Engine | Callable[[], sa.Engine]) -> sa.Connection:
    return (engine if isinstance(engine, sa.Engine) else engine()).connect()


def dataset_file(dataset: str | Path) -> Path:
    """``dataset`` as a file: a path (``*.json`` or an existing file), else the name of ``<name>.json`` in the
    datasets folder (``RAG_DATASETS_DIR``) when that exists, else ``dataset`` (a file only if it is one)."""
    path = Path(dataset)
    if path.suffix == ".json" or path.is_file():
        return path
    named = datasets_dir() / f"{dataset}.json"
    return named if named.is_file() else path


def load_dataset_file(engine: sa.Engine | Callable[[], sa.Engine], path: str | Path,
                      knowledge_base: str | None = None) -> Dataset:
    """:func:`load_dataset` of a file whose knowledge base may be ``external`` or ``attached``: there, a label that
    is no UUID is the external system's own id, mapped as a qrels import maps it and its original remembered
    (``external_chunk_ids``); on a project knowledge base it is refused as ever."""
    remembered: dict[str, str] = {}
    found: list[KnowledgeBaseRef] = []

    def labels_of(name: str) -> external_labels.Mapper | None:
        with _connect(engine) as conn:
            try:
                kb = resolve_knowledge_base(conn, name)
            except KnowledgeBaseError:
                return None  # named by the checks that follow
        if kb.kind not in external_labels.KINDS:
            return None
        found.append(kb)
        return external_labels.mapper(kb.name, remembered)

    dataset = load_dataset(path, knowledge_base=knowledge_base, labels_of=labels_of)
    if remembered and found:
        with _connect(engine) as conn, conn.begin():
            trec_queries.remember_ids(conn, found[0].id, sorted(remembered.items()))
    return dataset


def resolve_dataset(engine: sa.Engine | Callable[[], sa.Engine], argument: str | Path | uuid.UUID, *,
                    knowledge_base: str | KnowledgeBaseRef | None = None, version: str | None = None,
                    source: Literal["file", "stored", "any"] = "any") -> DatasetRef:
    """Resolve a dataset argument once, with its knowledge base (``knowledge_base``: a name, an id or resolved;
    the dataset must belong to it). ``source``: ``file``, ``stored`` (a version id, or a name with ``version`` a
    hash prefix), ``any`` (:func:`dataset_file` if it is one, else stored). A file is validated before ``engine``
    (or the function giving it) is used. Raises the user errors; nothing is written but the original ids of a file's
    labels that are no UUID on an external or attached knowledge base (:func:`load_dataset_file`)."""
    engine = engine if isinstance(engine, sa.Engine) else functools.cache(engine)
    kb = knowledge_base if isinstance(knowledge_base, KnowledgeBaseRef) else None
    path = Path(str(argument)) if source == "file" else dataset_file(str(argument)) if source == "any" else None
    if source == "any" and not (path and (path.suffix == ".json" or path.is_file())):
        path = None  # a stored dataset
    if path is not None:
        if kb is None and knowledge_base and as_uuid(str(knowledge_base)) is not None:  # an id: a bare array
            with _connect(engine) as conn:  # needs the name
                kb = resolve_knowledge_base(conn, str(knowledge_base))
        kb_name = kb.name if kb else knowledge_base if isinstance(knowledge_base, str) else None
        dataset, dataset_id = load_dataset_file(engine, path, kb_name), None
    with _connect(engine) as conn:
        if path is None:
            if knowledge_base is not None:
                kb = resolve_knowledge_base(conn, knowledge_base)
            version_id = argument if isinstance(argument, uuid.UUID) else as_uuid(str(argument))
            if version_id is not None:
                dataset, dataset_id = _stored(conn, version_id)
            elif kb is None:
                raise DatasetNotFoundError(f"stored dataset {show_name(str(argument))}: give its knowledge base")
            else:
                dataset, dataset_id = _stored(conn, stored_version(conn, kb, str(argument), version).id)
        kb = kb or resolve_knowledge_base(conn, dataset.knowledge_base)
    if dataset.knowledge_base != kb.name:
        raise KnowledgeBaseError(f"dataset {dataset.name!r} belongs to knowledge base {dataset.knowledge_base!r}, "
                                 f"not {kb.name!r}")
    return DatasetRef(dataset, kb, dataset_id)
