"""Statements on the stored dataset versions (``retrieval_evaluation_datasets``)."""

from __future__ import annotations

import json

import sqlalchemy as sa


def upsert_version(conn: sa.Connection, *, name: str, knowledge_base: str, content_hash: str, source_path,
                   cases: list[dict]) -> object:
    """The id of this version, inserted on first sight; on a later sight its ``last_seen_at`` moves to now()."""
    return conn.execute(sa.text(
        "INSERT INTO retrieval_evaluation_datasets (id, name, knowledge_base_name, source_path, content_hash, "
        "case_count, cases) VALUES (gen_random_uuid(), :name, :kb, :path, :hash, :n, CAST(:cases AS jsonb)) "
        "ON CONFLICT (name, knowledge_base_name, content_hash) DO UPDATE SET last_seen_at = now() RETURNING id"
    ), {"name": name, "kb": knowledge_base, "hash": content_hash, "path": source_path, "n": len(cases),
        "cases": json.dumps(cases, ensure_ascii=False)}).scalar_one()


def touch_version(conn: sa.Connection, *, name: str, knowledge_base: str, content_hash: str) -> object | None:
    """The id of this stored version, its ``last_seen_at`` moved to now(); None when it is not stored yet (then
    :func:`upsert_version` sends its cases)."""
    return conn.execute(sa.text(
        "UPDATE retrieval_evaluation_datasets SET last_seen_at = now() "
        "WHERE name = :name AND knowledge_base_name = :kb AND content_hash = :hash RETURNING id"),
        {"name": name, "kb": knowledge_base, "hash": content_hash}).scalar()


def version_by_id(conn: sa.Connection, dataset_id) -> sa.Row | None:
    return conn.execute(sa.text(
        "SELECT name, knowledge_base_name, source_path, content_hash, cases FROM retrieval_evaluation_datasets "
        "WHERE id = :id"), {"id": dataset_id}).first()


def version_exists(conn: sa.Connection, name: str, knowledge_base: str, content_hash: str) -> bool:
    return conn.execute(sa.text(
        "SELECT 1 FROM retrieval_evaluation_datasets WHERE name = :name AND knowledge_base_name = :kb "
        "AND content_hash = :h"), {"name": name, "kb": knowledge_base, "h": content_hash}).first() is not None


def source_path(conn: sa.Connection, name: str, knowledge_base: str, content_hash: str) -> str | None:
    """The file a dataset version was stored from."""
    return conn.execute(sa.text(
        "SELECT source_path FROM retrieval_evaluation_datasets WHERE name = :n AND knowledge_base_name = :kb "
        "AND content_hash = :h"), {"n": name, "kb": knowledge_base, "h": content_hash}).scalar()


def versions(conn: sa.Connection, name: str, knowledge_base: str) -> list[dict]:
    """Every stored version of a dataset, latest first."""
    return [dict(r) for r in conn.execute(sa.text("""
SELECT id::text AS dataset_id, content_hash, case_count, source_path, created_at, last_seen_at
FROM retrieval_evaluation_datasets WHERE name = :ds AND knowledge_base_name = :kb ORDER BY last_seen_at DESC, id
"""), {"ds": name, "kb": knowledge_base}).mappings()]


def versions_with_prefix(conn: sa.Connection, knowledge_base: str, name: str, prefix: str) -> list[sa.Row]:
    """The (at most two) latest versions whose hash starts with ``prefix``."""
    return list(conn.execute(sa.text("""
SELECT d.id, d.name, d.content_hash, d.case_count FROM retrieval_evaluation_datasets d
WHERE d.knowledge_base_name = :kb AND d.name = :name AND d.content_hash LIKE :prefix
ORDER BY d.last_seen_at DESC, d.id LIMIT 2
"""), {"kb": knowledge_base, "name": name, "prefix": prefix + "%"}).all())


def latest_versions(conn: sa.Connection, knowledge_base: str) -> list[sa.Row]:
    """Per dataset name of a knowledge base: its latest version, how many versions and runs, its last run."""
    return list(conn.execute(sa.text("""
SELECT DISTINCT ON (d.name) d.id, d.name, d.content_hash, d.case_count, d.source_path, d.created_at, d.last_seen_at,
       count(*) OVER (PARTITION BY d.name) AS versions,
       (SELECT count(*) FROM retrieval_evaluation_runs r JOIN retrieval_evaluation_datasets v ON v.id = r.dataset_id
        WHERE v.name = d.name AND v.knowledge_base_name = d.knowledge_base_name) AS runs,
       (SELECT max(r.started_at) FROM retrieval_evaluation_runs r JOIN retrieval_evaluation_datasets v
          ON v.id = r.dataset_id WHERE v.name = d.name AND v.knowledge_base_name = d.knowledge_base_name) AS last_run_at
FROM retrieval_evaluation_datasets d
WHERE d.knowledge_base_name = :kb
ORDER BY d.name, d.last_seen_at DESC, d.id
"""), {"kb": knowledge_base}).all())


def versions_of_name(conn: sa.Connection, name: str, knowledge_base: str | None, version: str | None) -> list[sa.Row]:
    """Versions of a dataset name, latest first (``knowledge_base``, ``version`` prefix: None = any), each with
    ``kbs``, how many knowledge bases the name is used with."""
    return list(conn.execute(sa.text("""
SELECT d.id::text AS dataset_id, d.content_hash, d.knowledge_base_name,
       (SELECT count(DISTINCT o.knowledge_base_name) FROM retrieval_evaluation_datasets o WHERE o.name = :ds) AS kbs
FROM retrieval_evaluation_datasets d
WHERE d.name = :ds AND (CAST(:kb AS text) IS NULL OR d.knowledge_base_name = :kb)
  AND (CAST(:version AS text) IS NULL OR d.content_hash LIKE CAST(:version AS text) || '%')
ORDER BY d.last_seen_at DESC, d.id
"""), {"ds": name, "kb": knowledge_base, "version": version}).all())


def knowledge_base_of_names(conn: sa.Connection) -> dict[str, str]:
    """Dataset name → the knowledge base of its latest stored version."""
    return {r.dataset: r.knowledge_base for r in conn.execute(sa.text("""
SELECT DISTINCT ON (d.name) d.name AS dataset, d.knowledge_base_name AS knowledge_base
FROM retrieval_evaluation_datasets d
JOIN knowledge_bases kb ON kb.name = d.knowledge_base_name
ORDER BY d.name, d.last_seen_at DESC, d.created_at DESC
"""))}
