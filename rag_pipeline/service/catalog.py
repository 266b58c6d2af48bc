"""What there is to evaluate: knowledge bases (counts, models, text mode, applicable strategies), their stored
datasets, and storing an uploaded dataset (the HTTP front end's upload; the CLI stores files with
:func:`rag_pipeline.service.datasets.register_dataset`).

The one applicability rule (docs/design.md §3.2), :func:`strategy_applicability`: a strategy runs on a knowledge
base when every model it needs is there — the vector leg's embedding model, and the rerank stage's model (stored
embeddings for the ``embedding`` method, a local directory for ``cross-encoder``) — and its text mode is ``kb``
or the knowledge base's own. ``suggest``, ``evaluate``, the console's pre-selection, the API's applicable
strategies and ``POST …/evaluate``, and the Dagster sensor's plan all ask it (through :func:`applicabilities`,
:func:`split_runnable` or :func:`require_runnable`), so none offers what another refuses. It is cheap (one query
for the stored models, a ``stat`` for a cross-encoder directory): loading a model stays with the run's
preflight."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import sqlalchemy as sa

from rag_pipeline.contracts.catalog import Applicability, DatasetInfo, DatasetVersion, KnowledgeBaseInfo, UploadResult
from rag_pipeline.contracts.errors import NotFoundError
from rag_pipeline.evaluation.dataset import (
    MAX_FILE_BYTES,
    DatasetError,
    DatasetProblem,
    parse_dataset,
    validate_dataset,
)
from rag_pipeline.evaluation.dataset_json import JsonObject, JsonReadError, decode_json
from rag_pipeline.evaluation.dataset_scan import ScanLimitError
from rag_pipeline.evaluation.label_check import relevant_ids_missing
from rag_pipeline.evaluation.persistence import store_dataset
from rag_pipeline.evaluation.queries import datasets as dataset_queries
from rag_pipeline.evaluation.queries import knowledge_base as kb_queries
from rag_pipeline.knowledge_base import chunk_lookup, lifecycle
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.knowledge_base.queries.documents import knowledge_base_names
from rag_pipeline.retrieval.strategies import Strategy, StrategyError, load_registry
from rag_pipeline.storage.names import DATASET as DATASET
from rag_pipeline.storage.names import KNOWLEDGE_BASE as KNOWLEDGE_BASE
from rag_pipeline.storage.names import STRATEGY_VERSION as STRATEGY_VERSION
from rag_pipeline.storage.names import check_name as check_name
from rag_pipeline.storage.names import is_valid_name as is_valid_name
from rag_pipeline.storage.names import name_rule as name_rule
from rag_pipeline.storage.names import printable as printable
from rag_pipeline.storage.names import show_name


class DatasetNotFoundError(NotFoundError, LookupError):
    """No stored dataset (version) of that name in the knowledge base; the message lists the known ones."""


def ping(engine: sa.Engine) -> None:
    """One round trip to the database (raises when it cannot be reached)."""
    with engine.connect() as conn:
        kb_queries.ping(conn)


def stored_models(conn: sa.Connection, kb) -> set[str]:
    """The embedding models a knowledge base (its row) holds vectors of."""
    return set(chunk_lookup.embedding_models(conn, kb.id))


def strategy_applicability(conn: sa.Connection, kb, strategy: Strategy, models: set[str] | None = None,
                           ) -> Applicability:
    """Whether ``strategy`` can run on knowledge base ``kb`` (a row or a name/id), checking every leg and stage
    and the text mode; ``models``: the KB's stored models when the caller already has them."""
    if isinstance(kb, str):
        kb = resolve_knowledge_base(conn, kb)
    models = stored_models(conn, kb) if models is None else models
    to_ingest: list[str] = []  # embedding models: fixed by ingesting with them
    problems: list[str] = []
    if strategy.vector_candidate_k and strategy.embedding_model not in models:
        to_ingest.append(strategy.embedding_model)
        problems.append(f"no {strategy.embedding_model!r} embeddings for the vector leg")
    rerank = strategy.rerank
    if rerank is not None and rerank.method == "embedding" and rerank.model not in models:
        to_ingest += [] if rerank.model in to_ingest else [rerank.model]
        problems.append(f"no {rerank.model!r} embeddings for the rerank stage")
    missing = list(to_ingest)
    if rerank is not None and rerank.method == "cross-encoder" and not Path(rerank.model).expanduser().is_dir():
        missing.append(rerank.model)
        problems.append(f"the rerank stage's cross-encoder directory {rerank.model} does not exist")
    if strategy.text_search not in ("kb", kb.text_search):
        problems.append(f"text mode {strategy.text_search!r} but the knowledge base was ingested with "
                        f"{kb.text_search!r}")
    if not problems:
        return Applicability(strategy=strategy.version, runnable=True, reason=None, missing_models=[])
    fix = f" (ingest with --models {' '.join(to_ingest)})" if to_ingest else ""
    reason = f"strategy {strategy.version} cannot run on knowledge base {kb.name!r}: {'; '.join(problems)}{fix}"
    return Applicability(strategy=strategy.version, runnable=False, reason=reason, missing_models=missing)


def applicabilities(conn: sa.Connection, kb, registry: Mapping[str, Strategy] | None = None,
                    ) -> dict[str, Applicability]:
    """:func:`strategy_applicability` of every strategy of ``registry`` (default: the registry file), by version."""
    if isinstance(kb, str):
        kb = resolve_knowledge_base(conn, kb)
    registry = registry if registry is not None else load_registry()
    models = stored_models(conn, kb)
    return {v: strategy_applicability(conn, kb, s, models) for v, s in registry.items()}


def split_runnable(conn: sa.Connection, kb, registry: Mapping[str, Strategy] | None = None,
                   ) -> tuple[list[str], dict[str, str]]:
    """(the versions that can run, ``{version: reason}`` for the others), in registry order."""
    checked = applicabilities(conn, kb, registry)
    return ([v for v, a in checked.items() if a.runnable],
            {v: a.reason for v, a in checked.items() if a.reason is not None})


def require_runnable(conn: sa.Connection, kb, strategies: Iterable[Strategy]) -> None:
    """Raise :class:`StrategyError` naming every strategy of ``strategies`` that cannot run on ``kb`` and why."""
    if isinstance(kb, str):
        kb = resolve_knowledge_base(conn, kb)
    models = stored_models(conn, kb)
    refused = [a.reason for a in (strategy_applicability(conn, kb, s, models) for s in strategies) if a.reason]
    if refused:
        raise StrategyError("; ".join(refused) + "; nothing was run")


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
        datasets=activity.datasets, runs=activity.runs, last_run_at=_iso(activity.last_run_at))


def list_knowledge_bases(engine: sa.Engine) -> list[KnowledgeBaseInfo]:
    """Every knowledge base by name: counts (documents, searchable, chunks, embeddings per model), text mode,
    the strategies it can run, and how many datasets and runs it has."""
    registry = load_registry()
    with engine.connect() as conn:
        names = knowledge_base_names(conn)
        return [_describe(conn, name, registry) for name in names]


def describe_knowledge_base(engine: sa.Engine, name_or_id: str) -> KnowledgeBaseInfo:
    """One knowledge base (name or id) as :func:`list_knowledge_bases` shows it."""
    with engine.connect() as conn:
        return _describe(conn, name_or_id, load_registry())


def choose_strategies(engine: sa.Engine, knowledge_base: str, versions: Sequence[str] | None) -> list[str]:
    """The strategy versions to run on a knowledge base: ``versions`` (each must exist and be applicable), or
    by default every applicable one. Raises :class:`StrategyError` naming each unknown or inapplicable one."""
    registry = load_registry()
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
        ok, skipped = split_runnable(conn, kb, registry)
    if not versions:
        if not ok:
            raise StrategyError(f"no strategy can run on knowledge base {kb.name!r}: " + "; ".join(skipped.values()))
        return ok
    chosen = list(dict.fromkeys(versions))
    problems = [f"unknown strategy version {show_name(v)}" for v in chosen if v not in registry]
    problems += [skipped[v] for v in chosen if v in skipped]
    if problems:
        raise StrategyError("; ".join(problems) + f" (known: {', '.join(registry)}; applicable: {', '.join(ok)})")
    return chosen


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def list_datasets(engine: sa.Engine, knowledge_base: str) -> list[DatasetInfo]:
    """The datasets stored for a knowledge base (name or id), by name: the latest version (id, hash, cases,
    source), how many versions and runs, when it was last seen and last run."""
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
        rows = dataset_queries.latest_versions(conn, kb.name)
    return [DatasetInfo(name=r.name, knowledge_base=kb.name, dataset_id=str(r.id), version=r.content_hash,
                        case_count=r.case_count, source_path=r.source_path, versions=r.versions, runs=r.runs,
                        created_at=_iso(r.created_at), last_seen_at=_iso(r.last_seen_at),
                        last_run_at=_iso(r.last_run_at)) for r in rows]


def find_dataset(engine: sa.Engine, knowledge_base: str, name: str, version: str | None = None) -> DatasetVersion:
    """A stored dataset version of a knowledge base: the latest of ``name``, or the one whose hash starts with
    ``version``."""
    prefix = (version or "").strip().lower()
    if prefix and (len(prefix) < 4 or not all(c in "0123456789abcdef" for c in prefix)):
        raise DatasetNotFoundError(f"dataset version {show_name(version)} is not a hash prefix of at least 4 hex "
                                   "digits")
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
        rows = dataset_queries.versions_with_prefix(conn, kb.name, name, prefix)
        if not rows:
            known = sorted({r.name for r in list_datasets(engine, kb.name)})
            what = f"version {prefix} of dataset" if prefix else "dataset"
            raise DatasetNotFoundError(f"no {what} {show_name(name)} in knowledge base {kb.name!r}; known: "
                                       f"{', '.join(known) if known else '(none — upload one first)'}")
    r = rows[0]
    return DatasetVersion(dataset_id=str(r.id), name=r.name, version=r.content_hash, case_count=r.case_count,
                          knowledge_base=kb.name)


def store_uploaded_dataset(engine: sa.Engine, knowledge_base: str, raw: bytes | str | dict, *, source: str,
                           name: str | None = None, default_name: str | None = None) -> UploadResult:
    """Validate dataset bytes exactly like a file (:func:`parse_dataset`: every problem at once, raised as
    :class:`DatasetError`, nothing written) for knowledge base ``knowledge_base`` (name or id), then store its
    version. The name: ``name``, else ``default_name`` (an uploaded file's stem, as a file is named by its
    stem), else the content's ``name`` field; a ``name`` field that differs from the name is a validation error,
    exactly as for a file."""
    with engine.connect() as conn:
        kb = resolve_knowledge_base(conn, knowledge_base)
    fallback = None if name else default_name or _field_name(raw)
    unnamed = [] if name or fallback else [DatasetProblem(
        "the dataset has no name: give a `name` field, or name the upload (`name` form field or `?name=`)",
        field="name")]
    try:
        if isinstance(raw, dict):  # already read strictly
            dataset = validate_dataset(raw, source=source, knowledge_base=kb.name, name=name, default_name=fallback)
        else:
            dataset = parse_dataset(raw, source=source, knowledge_base=kb.name, name=name, default_name=fallback)
    except DatasetError as exc:
        raise DatasetError(exc.source, [*unnamed, *exc.problems], more=exc.more) from None
    if unnamed:
        raise DatasetError(source, unnamed)
    with engine.begin() as conn:
        existed = dataset_queries.version_exists(conn, dataset.name, kb.name, dataset.content_hash)
        dataset_id = store_dataset(conn, dataset, kb.name)
        missing = relevant_ids_missing(conn, kb.id, dataset)
    ks = [c.k for c in dataset.cases]
    return UploadResult(dataset_id=str(dataset_id), name=dataset.name, version=dataset.content_hash,
                        case_count=len(dataset.cases), knowledge_base=kb.name,
                        relevant_ids=sum(len(c.relevant_chunk_ids) for c in dataset.cases),
                        relevant_ids_not_in_kb=missing, k_min=min(ks), k_max=max(ks), created=not existed)


def store_inline_cases(engine: sa.Engine, knowledge_base: str, body: bytes, name: str) -> UploadResult:
    """Store the ``cases`` of a JSON request body as a version of dataset ``name``, read strictly like a file
    (a repeated key is refused, not merged; the case limit is checked while streaming)."""
    try:
        data = decode_json(body, MAX_FILE_BYTES)
    except JsonReadError as exc:
        raise DatasetError("request body", [DatasetProblem(str(exc))]) from None
    except ScanLimitError as exc:
        raise DatasetError("request body", [DatasetProblem(str(exc), field="cases")]) from None
    cases = data.get("cases") if isinstance(data, dict) else None
    return store_uploaded_dataset(engine, knowledge_base, JsonObject(cases=cases), source="request body",
                                  name=name)


def _field_name(raw: bytes | str | dict) -> str | None:
    """The ``name`` field of an object-form dataset, when it has a usable one (else the caller's default); read
    through the bounded reader, so a hostile body is never decoded here."""
    try:
        data = raw if isinstance(raw, dict) else decode_json(raw, MAX_FILE_BYTES)
    except (JsonReadError, ScanLimitError):
        return None
    value = data.get("name") if isinstance(data, dict) else None
    return value if isinstance(value, str) and value else None
