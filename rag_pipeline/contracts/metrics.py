"""The retrieval metrics' names, short labels and per-case model, defined here once (definitions:
:mod:`rag_pipeline.evaluation.metrics`)."""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    Field,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic_core import CoreSchema


class Metrics(BaseModel):
    """Per-case metrics at the case's own k (trec_eval conventions)."""

    model_config = {"extra": "forbid"}

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


def _inline(items: dict[str, Any], inner: dict[str, Any]) -> dict[str, Any]:
    """``items`` with its ``metrics`` entry replaced, in its place, by ``inner``."""
    return {k2: v2 for k, v in items.items() for k2, v2 in (inner.items() if k == "metrics" else [(k, v)])}


class InlineMetrics(BaseModel):
    """A model with a ``metrics: Metrics`` (or ``Metrics | None``) field that is written, read and published as
    the seven metric keys in that field's place (``None``: seven nulls), as its JSON has always been."""

    @model_validator(mode="before")
    @classmethod
    def _nest_metrics(cls, data: Any) -> Any:
        if isinstance(data, dict) and "metrics" not in data and any(m in data for m in METRIC_NAMES):
            nested = {m: data.get(m) for m in METRIC_NAMES}
            rest = {k: v for k, v in data.items() if k not in nested}
            data = rest | {"metrics": None if all(v is None for v in nested.values()) else nested}
        return data

    @model_serializer(mode="wrap")
    def _inline_metrics(self, handler: SerializerFunctionWrapHandler):  # no return type: the model's own schema
        out = handler(self)
        return _inline(out, out["metrics"] or dict.fromkeys(METRIC_NAMES)) if "metrics" in out else out

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        json_schema = handler(core_schema)
        schema = handler.resolve_ref_schema(json_schema)
        value = {"anyOf": [{"type": "number"}, {"type": "null"}]} if "anyOf" in schema["properties"]["metrics"] \
            else {"type": "number"}
        schema["properties"] = _inline(schema["properties"],
                                       {m: {**value, "title": m.replace("_", " ").title()} for m in METRIC_NAMES})
        schema["required"] = [r for k in schema["required"] for r in (METRIC_NAMES if k == "metrics" else [k])]
        return json_schema


class Judged(BaseModel):
    """How much of one case's ranking carries a judgment (any grade, 0 included): Judged@k as ir_measures defines
    it and the judged share of the whole stored pool (docs/metrics.md); null, with ``reason``, when undefined."""

    model_config = {"extra": "forbid"}

    at_k: float | None = Field(description="Judged@k: judged chunks among the top min(k, retrieved) / that count "
                                           "(null: nothing retrieved).")
    unjudged_at_k: int = Field(description="Chunks in the top k without a judgment (what `suggest --from-run` "
                                           "drafts).")
    pool: float | None = Field(description="Judged chunks of the whole stored pool / the pool's size (null: an "
                                           "empty pool).")
    pool_size: int
    reason: str | None = Field(None, description="Why a value is null.")


class JudgedSummary(BaseModel):
    """A run's judged shares: the mean of each case's :class:`Judged` over the scored cases where it is
    defined (the undefined ones counted)."""

    model_config = {"extra": "forbid"}

    at_k: float | None = Field(description="Mean Judged@k (null: no scored case retrieved anything).")
    pool: float | None = Field(description="Mean judged share of the pool.")
    unjudged_at_k: int = Field(description="Unjudged chunks in the top k, summed over the cases.")
    cases: int = Field(description="Scored cases with a defined Judged@k.")
    undefined: int = Field(description="Scored cases without one (nothing retrieved).")
