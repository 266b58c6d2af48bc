"""Whether a knowledge base's in-memory leg index fits the evaluation's memory budget (``RAG_MEMORY_LEGS_MB``,
default a quarter of the machine's RAM). An index estimated above it is not loaded: the leg runs its SQL statement,
which gives the same hits (docs/strategies.md, "Where an evaluation runs each leg"), and the run's log says which
leg, how big and why (and, at info, that an index fits). The estimates are the peak bytes of loading an index,
measured with ``tracemalloc`` (134 bytes per posting on SciFact; 4.47 per vector component at 1,000,000 × 512, of
which the float32 matrix is 4 and a block of rows as read 0.2: ``bench/leg_load_bench.py``, bench/RESULTS.md),
rounded up."""

from __future__ import annotations

import logging

import psutil
import sqlalchemy as sa

from rag_pipeline.retrieval import bm25_sql
from rag_pipeline.retrieval import sql as retrieval_sql
from rag_pipeline.retrieval.dense_index import LOAD_ROWS
from rag_pipeline.settings import get_settings

POSTING_BYTES = 140
"""Peak bytes per posting while the keyword index loads: the binary rows, the posting and column arrays, the
BM25 and count matrices, the lexeme and chunk tables."""
VECTOR_BYTES_PER_VALUE = 4
"""Bytes per vector component of the exact index: its float32 matrix (filled block by block from a binary COPY,
not read all at once)."""
VECTOR_ROW_BYTES = 256
"""Bytes per vector besides its components: its chunk id, document references and norm (the block of rows being
read adds three copies of its components while it loads)."""


def budget_bytes() -> int:
    mb = get_settings().memory_legs_mb
    return mb * 2**20 if mb else psutil.virtual_memory().total // 4


def keyword_index_bytes(conn: sa.Connection, kb_id) -> int:
    return bm25_sql.searchable_postings(conn, kb_id) * POSTING_BYTES


def vector_index_bytes(conn: sa.Connection, model: str, vectors: int) -> int:
    """The exact leg's index of ``vectors`` searchable vectors of ``model`` (counted by the run's content version,
    :func:`~rag_pipeline.knowledge_base.versions.content_version`)."""
    dimension = retrieval_sql.model_dimension(conn, model) or 0
    # the block being read: its components up to three times (the COPY buffer, the block's vectors picked out of
    # it, their conversion to native float32)
    block = min(vectors, LOAD_ROWS) * (3 * dimension * VECTOR_BYTES_PER_VALUE + 1024)
    return vectors * (dimension * VECTOR_BYTES_PER_VALUE + VECTOR_ROW_BYTES) + block


def fits(leg: str, need: int, logger: logging.Logger | logging.LoggerAdapter) -> bool:
    """``need`` bytes within the budget (logged at info); else logs that ``leg`` runs in SQL and returns False."""
    budget = budget_bytes()
    if need <= budget:
        logger.info(f"{leg}: in memory, its index about {need / 2**20:,.1f} MiB to load, within the budget of "
                    f"{budget / 2**20:,.1f} MiB (RAG_MEMORY_LEGS_MB)")
        return True
    logger.warning(f"{leg}: its in-memory index would take about {need / 2**20:,.1f} MiB, over the budget of "
                   f"{budget / 2**20:,.1f} MiB (RAG_MEMORY_LEGS_MB), so in this run {leg} runs its SQL statement "
                   "(the same hits, slower)")
    return False
