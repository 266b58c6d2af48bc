"""Strategy versions are immutable (docs/design.md §3.2): the first run of a version records its parameters in
``retrieval_strategies``, later runs must match, or bump the version (old results would be mislabelled)."""

from __future__ import annotations

import json

import sqlalchemy as sa

from rag_pipeline.contracts.errors import ConflictError
from rag_pipeline.retrieval import sql as retrieval_sql
from rag_pipeline.retrieval.strategies import Strategy


class StrategyConflictError(ConflictError, RuntimeError):
    """A strategy version is being run with parameters other than the ones it was first run with."""


def register_strategy(conn: sa.Connection, strategy: Strategy) -> str:
    """Record ``strategy`` on first use (idempotent, safe when concurrent); return its params hash.
    Raises :class:`StrategyConflictError` if the version was recorded with different parameters."""
    params_hash = strategy.params_hash()
    stored = retrieval_sql.record_strategy(conn, strategy.version, params_hash, json.dumps(strategy.params()))
    if stored.params_hash != params_hash:
        raise StrategyConflictError(_conflict_message(strategy, stored.params_hash, stored.params or {}))
    return params_hash


def _conflict_message(strategy: Strategy, stored_hash: str, stored_params: dict) -> str:
    current = strategy.params()
    changed = [f"{name}: {stored_params.get(name, '(absent)')!r} → {current.get(name, '(absent)')!r}"
               for name in sorted(set(current) | set(stored_params)) if stored_params.get(name) != current.get(name)]
    return (f"strategy {strategy.version} was run before with different parameters "
            f"(hash {stored_hash[:12]}… ≠ {strategy.params_hash()[:12]}…"
            + (f"; changed {', '.join(changed)}" if changed else "")
            + f"): bump the version (e.g. {_next_version(strategy.version)}) instead of changing it")


def _next_version(version: str) -> str:
    """``hybrid-v1`` → ``hybrid-v2``; anything else gets ``-v2`` appended."""
    head, sep, tail = version.rpartition("-v")
    return f"{head}-v{int(tail) + 1}" if sep and tail.isdigit() else f"{version}-v2"
