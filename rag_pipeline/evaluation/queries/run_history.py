"""Statements that pick runs out of the history (``retrieval_evaluation_runs``): a dataset's metrics over time, the
runs a comparison or a tuning reads, the current runs, the runs made outside Dagster."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from rag_pipeline.evaluation.metrics import METRIC_NAMES


def succeeded_runs(conn: sa.Connection, dataset: str, kb_id, limit: int) -> Sequence[sa.RowMapping]:
    """Every succeeded run of a dataset name on a knowledge base, all versions, oldest first, with its averages."""
    return conn.execute(sa.text("""
SELECT r.id::text AS run_id, r.strategy_version, d.content_hash, r.is_current, r.started_at, r.finished_at,
       r.case_count, r.precision_at_k, r.recall_at_k, r.reciprocal_rank, r.ndcg_at_k, r.hit_at_k,
       r.average_precision_at_k, r.r_precision
FROM retrieval_evaluation_runs r JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
WHERE d.name = :ds AND r.knowledge_base_id = :kb AND r.status = 'succeeded' AND r.finished_at IS NOT NULL
ORDER BY r.finished_at, r.id
LIMIT :limit
"""), {"ds": dataset, "kb": kb_id, "limit": int(limit)}).mappings().all()


def finished_outside_dagster(conn: sa.Connection, after: str, after_id: str, limit: int) -> Sequence[sa.RowMapping]:
    """Succeeded runs without a Dagster run id finished after (``after``, ``after_id``), oldest first."""
    return conn.execute(sa.text(f"""
SELECT r.id::text AS run_id, d.name AS dataset, d.content_hash, kb.name AS knowledge_base, r.strategy_version,
       r.knowledge_base_version,
       r.params_hash, r.case_count, r.candidate_count, r.finished_at, {', '.join('r.' + m for m in METRIC_NAMES)}
FROM retrieval_evaluation_runs r
JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
JOIN knowledge_bases kb ON kb.id = r.knowledge_base_id
WHERE r.status = 'succeeded' AND r.dagster_run_id IS NULL
  AND (r.finished_at, r.id::text) > (CAST(:after AS timestamptz), CAST(:after_id AS text))
ORDER BY r.finished_at, r.id::text
LIMIT :limit
"""), {"after": after, "after_id": after_id, "limit": limit}).mappings().all()


def current_runs(conn: sa.Connection) -> Sequence[sa.Row]:
    """Every current succeeded run: dataset, knowledge base, strategy, the knowledge-base version it measured."""
    return conn.execute(sa.text("""
SELECT d.name AS dataset, kb.name AS knowledge_base, r.strategy_version, r.knowledge_base_version, r.id::text AS run_id
FROM retrieval_evaluation_runs r
JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
JOIN knowledge_bases kb ON kb.id = r.knowledge_base_id
WHERE r.is_current AND r.status = 'succeeded'
ORDER BY d.name, r.strategy_version, kb.name
""")).all()


def current_params(conn: sa.Connection, dataset: str, knowledge_base: str, content_hash: str) -> dict[str, str]:
    """Strategy → parameters hash of the current succeeded runs on one dataset version."""
    return dict(conn.execute(sa.text("""
SELECT r.strategy_version, r.params_hash FROM retrieval_evaluation_runs r
JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
WHERE d.name = :ds AND d.knowledge_base_name = :kb AND d.content_hash = :hash AND r.is_current
  AND r.status = 'succeeded'
"""), {"ds": dataset, "kb": knowledge_base, "hash": content_hash}).all())


# Per strategy: the succeeded run on that dataset version with the latest start (its "current" run there).
_LATEST_PER_STRATEGY_SQL = """
SELECT DISTINCT ON (r.strategy_version) r.id::text AS run_id, r.strategy_version, r.finished_at
FROM retrieval_evaluation_runs r
JOIN knowledge_bases kb ON kb.id = r.knowledge_base_id
WHERE r.dataset_id = CAST(:dataset_id AS uuid) AND r.status = 'succeeded' AND kb.name = :kb
ORDER BY r.strategy_version, r.started_at DESC, r.id
"""
# Strategies with a succeeded run on some other version of the dataset only (stale on this one).
_OTHER_VERSIONS_SQL = """
SELECT r.strategy_version, max(d.content_hash) AS content_hash
FROM retrieval_evaluation_runs r
JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
WHERE d.name = :ds AND d.knowledge_base_name = :kb AND r.status = 'succeeded' AND r.is_current
  AND d.id <> CAST(:dataset_id AS uuid)
GROUP BY r.strategy_version ORDER BY r.strategy_version
"""


def latest_per_strategy(conn: sa.Connection, dataset_id: str, knowledge_base: str) -> Sequence[sa.Row]:
    """Per strategy, the latest-started succeeded run on one dataset version: ``run_id``, strategy, finish."""
    return conn.execute(sa.text(_LATEST_PER_STRATEGY_SQL), {"dataset_id": dataset_id, "kb": knowledge_base}).all()


def current_on_other_versions(conn: sa.Connection, dataset: str, knowledge_base: str,
                              dataset_id: str) -> Sequence[sa.Row]:
    """``strategy_version``, ``content_hash`` of the current succeeded runs on other versions of the dataset."""
    return conn.execute(sa.text(_OTHER_VERSIONS_SQL), {"ds": dataset, "kb": knowledge_base,
                                                       "dataset_id": dataset_id}).all()


def latest_of_strategy(conn: sa.Connection, strategy_version: str, dataset_id: str | None) -> sa.Row | None:
    """The latest-started succeeded run of a strategy on a dataset version, with its parameters and names."""
    return conn.execute(sa.text("""
SELECT r.id::text AS run_id, r.strategy_version, r.params_hash, r.strategy_params, r.case_count,
       r.finished_at, d.name AS dataset_name, d.content_hash, kb.name AS kb_name
FROM retrieval_evaluation_runs r
JOIN retrieval_evaluation_datasets d ON d.id = r.dataset_id
JOIN knowledge_bases kb ON kb.id = r.knowledge_base_id
WHERE r.strategy_version = :sv AND r.status = 'succeeded' AND r.dataset_id = CAST(:dataset_id AS uuid)
ORDER BY r.started_at DESC, r.id
LIMIT 1
"""), {"sv": strategy_version, "dataset_id": dataset_id}).first()


def strategies_with_runs(conn: sa.Connection, dataset_id: str) -> Sequence[str]:
    """The strategies with a succeeded run on a dataset version, by name."""
    return conn.execute(sa.text(
        "SELECT DISTINCT r.strategy_version FROM retrieval_evaluation_runs r "
        "WHERE r.dataset_id = CAST(:dataset_id AS uuid) AND r.status = 'succeeded' ORDER BY 1"),
        {"dataset_id": dataset_id}).scalars().all()
