"""Tuning results: the fusion tuned on a stored run's pools, and the stage configuration chosen on one dataset
and reported on another (``rag-pipeline tune --format json``, the ``fusion_sweep`` asset's metadata)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from rag_pipeline.contracts.metrics import InlineMetrics, Metrics


class WrittenStrategy(BaseModel):
    """The registry file the tuned strategy was appended to; ``status``: ``appended`` or ``unchanged``."""

    path: str
    status: str


class FoldChoice(BaseModel):
    """A fold: its cases, the configuration chosen on the other folds, its held-out mean."""

    fold: int
    cases: int
    chosen: str
    held_out_mean: float


class RankedFusion(InlineMetrics):
    """One of the best fusion configurations on all cases: its parameters, every metric's mean, how many folds
    chose it, and whether it is the pool strategy's own (``is_base``) or the recommended one."""

    rank: int
    fusion: str
    normalization: str
    vector_weight: float
    keyword_weight: float
    rrf_k: int
    label: str
    metrics: Metrics  # written as the seven metric keys in this place
    folds_chosen: int
    is_base: bool
    is_recommended: bool


class FusionTuning(BaseModel):
    """``rag-pipeline tune --format json``: the recommended fusion, its cross-validated estimate and the sweep."""

    dataset: str
    dataset_version: str
    knowledge_base: str
    pool_run_id: str
    pool_strategy: str
    folds: int
    seed: int
    base_fusion: str
    metric: str
    predicted_mean: float
    base_mean: float
    gain: float
    p_value: float
    recall_ceiling: float
    base_version: str
    recommended_version: str
    recommended: str
    cv_mean: float
    cv_ci: list[float]
    gain_ci: list[float]
    fold_choices: list[str]
    cases: int
    configurations: int
    per_fold: list[FoldChoice]
    top_configurations: list[RankedFusion]
    strategy: dict[str, Any]
    yaml: str
    notes: list[str]
    written: WrittenStrategy | None = None


class SplitTrain(BaseModel):
    """The dataset the configuration is chosen on: the in-sample mean is not an estimate, the CV mean is."""

    dataset: str
    dataset_version: str
    run_id: str
    cases: int
    in_sample_mean: float
    own_mean: float
    cv_mean: float
    cv_ci: list[float]
    fold_choices: list[str]


class SplitTest(BaseModel):
    """The held-out dataset the chosen configuration is reported on (the estimate)."""

    dataset: str
    dataset_version: str
    run_id: str
    cases: int
    chosen_mean: float
    own_mean: float
    gain: float
    gain_ci: list[float]
    p_value: float


class RankedStage(BaseModel):
    rank: int
    label: str
    train_mean: float
    is_own: bool
    is_chosen: bool


class StageTuning(BaseModel):
    """``rag-pipeline tune --train-dataset ... --format json``: first-stage fusion, completion and rerank mix."""

    metric: str
    pool_strategy: str
    configurations: int
    chosen: str
    recommended_version: str
    train: SplitTrain
    estimate: float
    estimate_source: str
    test: SplitTest | None
    top_configurations: list[RankedStage]
    strategy: dict[str, Any]
    yaml: str
    notes: list[str]
    written: WrittenStrategy | None = None
