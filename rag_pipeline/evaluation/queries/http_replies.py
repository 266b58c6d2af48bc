"""SQL of an ``http`` strategy's kept replies (``http_retriever_replies``, migration 0012)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa


def kept(conn: sa.Connection, params_hash: str, dataset_id) -> list[sa.Row]:
    """The replies kept for this strategy identity and dataset version: ``case_id, ranking, latency_ms, attempts``."""
    return list(conn.execute(sa.text(
        "SELECT case_id, ranking, latency_ms, attempts FROM http_retriever_replies "
        "WHERE params_hash = :h AND dataset_id = :d"), {"h": params_hash, "d": dataset_id}))


def keep(conn: sa.Connection, params_hash: str, dataset_id, rows: Sequence[tuple[str, dict[str, Any], float, int]]
         ) -> None:
    """Keep ``(case_id, ranking, latency_ms, attempts)`` rows (a case kept already keeps its first reply)."""
    if rows:
        conn.execute(sa.text(
            "INSERT INTO http_retriever_replies (params_hash, dataset_id, case_id, ranking, latency_ms, attempts) "
            "SELECT :h, :d, c, CAST(r AS jsonb), l, a FROM unnest(CAST(:cases AS text[]), CAST(:rankings AS text[]), "
            "CAST(:latencies AS float8[]), CAST(:attempts AS int[])) AS t(c, r, l, a) ON CONFLICT DO NOTHING"),
            {"h": params_hash, "d": dataset_id, "cases": [r[0] for r in rows],
             "rankings": [json.dumps(r[1]) for r in rows], "latencies": [r[2] for r in rows],
             "attempts": [r[3] for r in rows]})


def forget(conn: sa.Connection, params_hash: str, dataset_id) -> None:
    """Drop the kept replies once the run they made is stored (in its transaction)."""
    conn.execute(sa.text("DELETE FROM http_retriever_replies WHERE params_hash = :h AND dataset_id = :d"),
                 {"h": params_hash, "d": dataset_id})
