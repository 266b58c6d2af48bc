"""The retrieval metrics: their names, short labels and the per-case model, defined here once.

The definitions (trec_eval conventions) are in :mod:`rag_pipeline.evaluation.metrics`; the tables' metric columns
(:mod:`rag_pipeline.storage.evaluation_tables`), the run summary and every front end take the names from here.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Metrics(BaseModel):
    """Per-case metrics at the case's own k (trec_eval conventions)."""

    model_config = ConfigDict(extra="forbid")

    precision_at_k: float
    recall_at_k: float
    reciprocal_rank: float
    ndcg_at_k: float
    hit_at_k: float
    average_precision_at_k: float
    r_precision: float


METRIC_NAMES: tuple[str, ...] = tuple(Metrics.model_fields)
"""Every metric, in the order of the tables' columns and of every report."""
HEADLINE_METRICS = METRIC_NAMES[:4]
"""The four headline metrics: P@K, R@K, MRR, nDCG@K."""
METRIC_LABELS = dict(zip(METRIC_NAMES, ("P@k", "R@k", "MRR", "nDCG@k", "Hit@k", "AP@k", "R-prec"), strict=True))
"""Short column labels of the metrics (tables, charts, Dagster metadata)."""
