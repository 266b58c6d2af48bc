"""``GET /api/v1/retrieval/comparisons``: every strategy's current run on a dataset against a baseline — the
comparison ``rag-pipeline compare --format json`` prints (paired significance, CI, win/tie/loss, moved cases,
regression gate)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from rag_pipeline.contracts.comparison import StrategyComparison
from rag_pipeline.service import analysis
from rag_pipeline.service.analysis import DEFAULT_BASELINE
from rag_pipeline.storage.names import DATASET, check_name
from rag_pipeline.web.dependencies import Engine
from rag_pipeline.web.request_rules import DATASET_RULE, NAME_RULE, STRATEGY_RULE, VERSION_RULE

router = APIRouter(tags=["comparisons"])


@router.get("/retrieval/comparisons", response_model=StrategyComparison, summary="Compare strategies with a baseline")
def compare(engine: Engine,
            dataset: Annotated[str, Query(max_length=200, json_schema_extra=DATASET_RULE,
                                          description="The dataset's name.")],
            baseline: Annotated[str, Query(max_length=100, json_schema_extra=STRATEGY_RULE,
                                           description="Baseline strategy.")] = DEFAULT_BASELINE,
            knowledge_base: Annotated[str | None, Query(max_length=200, json_schema_extra=NAME_RULE,
                                                        description="When the dataset name is used "
                                                        "by several knowledge bases.")] = None,
            dataset_version: Annotated[str | None, Query(max_length=64, json_schema_extra=VERSION_RULE,
                                                         description="A version hash or prefix "
                                                         "(default: the latest).")] = None,
            margin: Annotated[float, Query(ge=0, le=1, description="Regression-gate margin.")] = 0.0,
            alpha: Annotated[float, Query(gt=0, lt=1, description="Significance level.")] = 0.05,
            resamples: Annotated[int, Query(ge=100, le=100_000, description="Permutation/bootstrap "
                                                                            "resamples.")] = 10000):
    """Every strategy's current run on one version of the dataset compared with the baseline's: the same
    numbers and gate as `rag-pipeline compare`; 404 when there is nothing to compare."""
    check_name(DATASET, dataset)
    return analysis.compare(engine, dataset, knowledge_base=knowledge_base, dataset_version=dataset_version,
                            baseline=baseline, margin=margin, alpha=alpha, n_resamples=resamples, named=True)
