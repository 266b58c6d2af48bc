"""The strategy comparison: every strategy's run on one dataset version against a baseline, with paired
significance, the cases that moved most and the regression gate (``rag-pipeline compare --format json`` and
``GET /api/v1/retrieval/comparisons``), and two runs paired case by case (the console's compare page)."""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer

from rag_pipeline.contracts.reports import PairedCase
from rag_pipeline.contracts.runs import RunSummary


def _finite(value: float) -> float | None:
    """NaN (e.g. the t-test p of identical values) as null, so the JSON is valid."""
    return None if math.isnan(value) else value


Finite = Annotated[float, PlainSerializer(_finite, return_type=float | None, when_used="json")]


class ComparedRun(BaseModel):
    """One strategy's run; every further field is the mean of one compared metric."""

    model_config = ConfigDict(extra="allow")

    strategy: str
    run_id: str
    cases: int
    dataset_version: str
    knowledge_base: str
    judged_at_k: float | None = Field(None, description="Mean Judged@k over the run's cases where it is defined "
                                                        "(docs/metrics.md); null: none.")

    def mean(self, metric: str) -> float:
        return (self.model_extra or {})[metric]


class PairedResult(BaseModel):
    """One strategy against the baseline on one metric, on the cases both runs share."""

    strategy: str
    metric: str
    n: int
    baseline_mean: Finite
    strategy_mean: Finite
    delta: Finite
    p_value: Finite
    ci_low: Finite
    ci_high: Finite
    ttest_p: Finite
    wins: int
    ties: int
    losses: int
    p_holm: Finite = float("nan")


class TopChunk(BaseModel):
    rank: int
    document_name: str
    chunk_id: str
    is_relevant: bool


class MovedCase(BaseModel):
    """A case whose primary metric changed, with the top stored candidates of both runs."""

    case_id: str
    baseline: float
    strategy: float
    delta: float
    before: list[TopChunk] = Field(default_factory=list)
    after: list[TopChunk] = Field(default_factory=list)


class Gate(BaseModel):
    passed: bool
    margin: float
    alpha: float
    metric: str
    failing: list[str] = Field(description="Strategies significantly worse than the baseline by more than margin.")
    description: str


class StrategyComparison(BaseModel):
    """The CLI's ``compare --format json``."""

    dataset: str
    baseline: str
    dataset_version: str = Field(description="The dataset version compared (runs on other versions are stale).")
    knowledge_base: str
    notes: list[str]
    runs: list[ComparedRun] = Field(description="Each strategy's run: run_id, cases and metric means.")
    paired: list[PairedResult] = Field(description="Per strategy × metric: means, delta, permutation p, "
                                                   "bootstrap 95% CI, t-test p, Holm p, wins/ties/losses.")
    moved: dict[str, list[MovedCase]] = Field(description="Per strategy: the cases that moved most.")
    stale: dict[str, str] = Field(description="Strategies without a run on this version, and why.")
    gate: Gate
    judged_warnings: list[str] = Field(default_factory=list, description="Strategies whose top k holds markedly "
                                       "more unjudged chunks than the baseline's, with the shares and the gap.")

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(self.runs[0].model_extra or ()) if self.runs else ()

    def result(self, strategy: str, metric: str = "ndcg_at_k") -> PairedResult:
        return next(p for p in self.paired if p.strategy == strategy and p.metric == metric)


class RunPair(BaseModel):
    """Two runs of the same dataset paired by ``case_id``: run ``a`` is the baseline side of ``comparison``.
    ``labels``: the names the two runs carry in the comparison; ``cases``: every shared case, most moved first."""

    a: RunSummary
    b: RunSummary
    labels: tuple[str, str]
    comparison: StrategyComparison
    cases: list[PairedCase]
    notes: list[str] = Field(default_factory=list)
