"""Dataset operations: store a dataset version, check its labels ("why are all metrics 0?"), plan the sensor's runs."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import sqlalchemy as sa

from rag_pipeline.contracts.agreement import AgreementReport
from rag_pipeline.contracts.dataset import DatasetRunPlan, StoredDataset
from rag_pipeline.contracts.label_check import DatasetCheck, LabelReport
from rag_pipeline.evaluation.agreement import agreement_report
from rag_pipeline.evaluation.datasets.judgments import with_resolved_labels
from rag_pipeline.evaluation.datasets.label_check import check_labels, relevant_ids_missing
from rag_pipeline.evaluation.datasets.load import MAX_FILE_BYTES, load_dataset, relevant_ids_of, validate_dataset
from rag_pipeline.evaluation.datasets.resolve import DatasetRef, dataset_file, load_dataset_file, resolve_dataset
from rag_pipeline.evaluation.datasets.strict_json import DatasetError, DatasetProblem, JsonReadError, decode_json
from rag_pipeline.evaluation.runs.queries import current_params
from rag_pipeline.evaluation.runs.results import store_dataset
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseError
from rag_pipeline.retrieval.strategies import StrategyError, load_registry
from rag_pipeline.service.applicability import applicabilities
from rag_pipeline.settings import get_settings
from rag_pipeline.storage.files import FileReadError, check_writable, read_bounded, write_atomic
from rag_pipeline.storage.names import printable


def register_dataset(engine: sa.Engine, path: str | Path, knowledge_base: str | None = None) -> StoredDataset:
    """Validate a dataset file (every problem at once, nothing written if any) and store its version."""
    ref = resolve_dataset(engine, path, knowledge_base=knowledge_base, source="file")
    with engine.begin() as conn:
        dataset_id = store_dataset(conn, ref.dataset, ref.kb.name)
    return _stored(engine, DatasetRef(ref.dataset, ref.kb, str(dataset_id)), str(path))


def describe_stored_dataset(engine: sa.Engine, dataset_id: str, expected_name: str | None = None) -> StoredDataset:
    """A stored dataset version described as :func:`register_dataset` describes a file (``path`` None)."""
    ref = resolve_dataset(engine, dataset_id, source="stored")
    if expected_name is not None and ref.dataset.name != expected_name:
        raise DatasetError(f"dataset version {dataset_id}", [DatasetProblem(
            f"is dataset {ref.dataset.name!r}, not {expected_name!r} (the partition's dataset)")])
    return _stored(engine, ref, None)


def _stored(engine: sa.Engine, ref: DatasetRef, path: str | None) -> StoredDataset:
    dataset = ref.dataset
    with engine.connect() as conn:
        missing = relevant_ids_missing(conn, ref.kb.id, dataset)
    ks = [c.k for c in dataset.cases]
    return StoredDataset(dataset_id=str(ref.dataset_id), name=dataset.name, version=dataset.content_hash,
                         knowledge_base=ref.kb.name, path=path, cases=len(dataset.cases),
                         relevant_ids=sum(len(c.relevant_chunk_ids) for c in dataset.cases),
                         relevant_ids_not_in_kb=missing, k_min=min(ks), k_max=max(ks))


def check_dataset(engine: sa.Engine, path: str | Path, knowledge_base: str | None = None) -> DatasetCheck:
    """Classify every relevant id of a dataset file against its knowledge base (docs/design.md §8)."""
    path = Path(path)
    note = None
    cases: Sequence[object]
    try:
        dataset = load_dataset_file(engine, path, knowledge_base)
        cases, kb = dataset.cases, dataset.knowledge_base
    except DatasetError as exc:
        cases, file_kb = _lenient_cases(path, exc)
        if not (kb := knowledge_base or file_kb or ""):
            raise
        note = "the dataset has malformed ids (reported as not_a_uuid below); fix them before evaluating"
    with engine.connect() as conn:
        return DatasetCheck(report=check_labels(conn, kb, cases), note=note)


def check_stored_dataset(engine: sa.Engine, dataset_id: str) -> LabelReport:
    """The label report of a stored dataset version."""
    ref = resolve_dataset(engine, dataset_id, source="stored")
    with engine.connect() as conn:
        return check_labels(conn, ref.kb, ref.dataset.cases)


def dataset_agreement(engine: sa.Engine | Callable[[], sa.Engine], argument: str, *,
                      knowledge_base: str | None = None, version: str | None = None,
                      resolved: str | Path | None = None) -> tuple[AgreementReport, str | None]:
    """The annotator agreement of a dataset file (no database needed) or of a stored dataset; with ``resolved``
    (a file only), the file is first given the labels the rule makes of its judgments, validated, and written
    whole to ``resolved``: ``(report, path written)``."""
    path = dataset_file(argument)
    if not path.is_file():
        if resolved:
            raise DatasetError(printable(argument), [DatasetProblem("--resolved needs a dataset file, not a stored "
                                                                    "dataset (its labels cannot be changed)")])
        return stored_agreement(engine, knowledge_base, argument, version), None
    if not resolved:
        return agreement_report(load_dataset(path, knowledge_base=knowledge_base)), None
    check_writable(resolved, example="resolved.json")
    source = printable(path)
    try:
        data = with_resolved_labels(decode_json(read_bounded(path, MAX_FILE_BYTES, what="file"), MAX_FILE_BYTES))
    except (FileReadError, JsonReadError) as exc:
        raise DatasetError(source, [DatasetProblem(getattr(exc, "reason", str(exc)))]) from None
    dataset = validate_dataset(data, source=source, knowledge_base=knowledge_base, default_name=Path(resolved).stem,
                               source_path=str(path.resolve()))
    write_atomic(resolved, json.dumps(data, ensure_ascii=False, indent=2) + "\n")
    return agreement_report(dataset), str(resolved)


def stored_agreement(engine: sa.Engine | Callable[[], sa.Engine], knowledge_base: str | None, name: str,
                     version: str | None = None) -> AgreementReport:
    """The annotator agreement of a stored dataset (its latest version, or the one ``version`` starts)."""
    ref = resolve_dataset(engine, name, knowledge_base=knowledge_base, version=version, source="stored")
    return agreement_report(ref.dataset)


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


def dataset_identity(name_or_file: str, knowledge_base: str | None = None) -> tuple[str, str | None]:
    """``(name, knowledge_base)`` of a dataset argument: a stored dataset's name or key, or a dataset file."""
    if Path(name_or_file).is_file():
        dataset = load_dataset(name_or_file, knowledge_base=knowledge_base)
        return dataset.name, dataset.knowledge_base
    return name_or_file, knowledge_base


def plan_dataset_runs(engine: sa.Engine, path: str | Path, versions: Sequence[str] | None = None) -> DatasetRunPlan:
    """Validate a dataset file; the runnable strategies whose current run has not measured this version."""
    path = Path(path)
    try:
        ref = resolve_dataset(engine, path, source="file")
        dataset, kb = ref.dataset, ref.kb
        with engine.connect() as conn:
            registry = load_registry()
            wanted = list(versions or (dataset.metadata or {}).get("strategies") or _setting_strategies() or registry)
            unknown = [v for v in wanted if v not in registry]
            if unknown:
                raise StrategyError(f"{path}: unknown strategy version(s) {unknown}; known: {sorted(registry)}")
            checked = applicabilities(conn, kb, {v: registry[v] for v in wanted})  # the one rule
            current = current_params(conn, dataset.name, kb.name, dataset.content_hash)
    except (ValueError, KnowledgeBaseError) as exc:  # DatasetError, StrategyError, unreadable file
        return DatasetRunPlan(problems=str(exc))
    to_run: list[str] = []
    skipped: dict[str, str] = {}
    for version in wanted:
        strategy = registry[version]
        if not checked[version].runnable:
            skipped[version] = checked[version].reason or ""
        elif current.get(version) == strategy.params_hash():
            skipped[version] = f"its current run already measured version {dataset.version} with these parameters"
        else:
            to_run.append(version)
    return DatasetRunPlan(to_run=tuple(to_run), skipped=skipped, dataset_version=dataset.version)


def _setting_strategies() -> list[str]:
    raw = get_settings().sensor_strategies or ""
    return [v.strip() for v in raw.split(",") if v.strip()]
