"""Lineage: knowledge-base content versions and the current runs that measured an older one."""

from __future__ import annotations

import sqlalchemy as sa

from rag_pipeline.contracts.knowledge_base import KnowledgeBaseVersion, StaleRun
from rag_pipeline.evaluation.queries.knowledge_base import snapshot
from rag_pipeline.evaluation.runs import queries as run_history
from rag_pipeline.knowledge_base import versions
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base


def knowledge_base_version(engine: sa.Engine, knowledge_base: str) -> KnowledgeBaseVersion:
    """The current content version of one knowledge base (name or id)."""
    with engine.connect() as conn, conn.begin():
        snapshot(conn, read_only=True)
        return versions.content_version(conn, knowledge_base)


def knowledge_base_versions(engine: sa.Engine) -> list[KnowledgeBaseVersion]:
    """Every knowledge base's current content version, by name (one snapshot)."""
    with engine.connect() as conn, conn.begin():
        snapshot(conn, read_only=True)
        return versions.all_versions(conn)


def stale_runs(engine: sa.Engine) -> list[StaleRun]:
    """Current succeeded runs that measured another knowledge-base version than the current one."""
    with engine.connect() as conn, conn.begin():
        snapshot(conn, read_only=True)
        current = run_history.current_runs(conn)
        # an attached knowledge base (the user's tables) changes outside the project: each run records what it saw
        attached = {n for n in {r.knowledge_base for r in current}
                    if resolve_knowledge_base(conn, n).kind == "attached"}
        rows = [r for r in current if r.knowledge_base not in attached]
        now = {name: versions.content_version(conn, name).version for name in {r.knowledge_base for r in rows}}
    return [StaleRun(run_id=r.run_id, dataset=r.dataset, knowledge_base=r.knowledge_base,
                     strategy_version=r.strategy_version, measured_version=r.knowledge_base_version,
                     current_version=now[r.knowledge_base])
            for r in rows if r.knowledge_base_version != now[r.knowledge_base]]
