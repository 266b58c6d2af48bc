"""Which strategies can run on a knowledge base: the one applicability rule (docs/design.md §3.2), asked by every
front end and the sensor, so none offers what another refuses. Cheap: loading a model stays with the preflight."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import sqlalchemy as sa

from rag_pipeline.contracts.catalog import Applicability
from rag_pipeline.knowledge_base import attached, catalogue, chunk_lookup
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseRef, resolve_knowledge_base
from rag_pipeline.retrieval.attached_search import check_strategy
from rag_pipeline.retrieval.strategies import Strategy, StrategyError, load_registry
from rag_pipeline.retrieval.trace import RetrievalError
from rag_pipeline.storage.names import show_name


def strategy_applicability(conn: sa.Connection, kb, strategy: Strategy, models: set[str] | None = None,
                           ) -> Applicability:
    """Whether ``strategy`` can run on knowledge base ``kb``: every leg and stage, and the text mode."""
    if isinstance(kb, str):
        kb = resolve_knowledge_base(conn, kb)
    if isinstance(kb, KnowledgeBaseRef) and kb.kind == "attached" and strategy.http is None:
        return _attached(conn, kb, strategy)
    if isinstance(kb, KnowledgeBaseRef) and catalogue.is_external(kb) and strategy.http is None:
        return Applicability(strategy=strategy.version, runnable=False, missing_models=[],
                             reason=catalogue.no_built_in_strategy(kb, strategy.version))
    models = set(chunk_lookup.embedding_models(conn, kb.id)) if models is None else models
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


def _attached(conn: sa.Connection, kb: KnowledgeBaseRef, strategy: Strategy) -> Applicability:
    """The rule for an attached knowledge base (the user's tables): :func:`attached_search.check_strategy`."""
    found = attached.load(conn, kb)
    assert found is not None
    try:
        check_strategy(found, strategy)
    except RetrievalError as exc:
        return Applicability(strategy=strategy.version, runnable=False, reason=str(exc), missing_models=[])
    return Applicability(strategy=strategy.version, runnable=True, reason=None, missing_models=[])


def applicabilities(conn: sa.Connection, kb, registry: Mapping[str, Strategy] | None = None,
                    ) -> dict[str, Applicability]:
    """:func:`strategy_applicability` of every strategy of ``registry`` (default: the registry file), by version."""
    if isinstance(kb, str):
        kb = resolve_knowledge_base(conn, kb)
    registry = registry if registry is not None else load_registry()
    models = set(chunk_lookup.embedding_models(conn, kb.id))
    return {v: strategy_applicability(conn, kb, s, models) for v, s in registry.items()}


def split_runnable(conn: sa.Connection, kb, registry: Mapping[str, Strategy] | None = None,
                   ) -> tuple[list[str], dict[str, str]]:
    """(the versions that can run, ``{version: reason}`` for the others), in registry order."""
    checked = applicabilities(conn, kb, registry)
    return ([v for v, a in checked.items() if a.runnable],
            {v: a.reason or "" for v, a in checked.items() if not a.runnable})


def require_runnable(conn: sa.Connection, kb, strategies: Iterable[Strategy]) -> None:
    """Raise :class:`StrategyError` naming every strategy of ``strategies`` that cannot run on ``kb`` and why."""
    if isinstance(kb, str):
        kb = resolve_knowledge_base(conn, kb)
    models = set(chunk_lookup.embedding_models(conn, kb.id))
    refused = [a.reason or "" for a in (strategy_applicability(conn, kb, s, models) for s in strategies)
               if not a.runnable]
    if refused:
        raise StrategyError("; ".join(refused) + "; nothing was run")


def choose_strategies(engine: sa.Engine, knowledge_base: str | KnowledgeBaseRef,
                      versions: Sequence[str] | None) -> list[str]:
    """``versions`` (each existing and applicable, else :class:`StrategyError`), by default every applicable one."""
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
