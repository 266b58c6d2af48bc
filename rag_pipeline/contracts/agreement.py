"""How far annotators (or a judge and people) agree (docs/metrics.md, "Agreement"): the shapes of a dataset's
agreement report and of a two-rater comparison."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Kappa(BaseModel):
    """A κ, or ``None`` with the reason it is undefined (no item, or chance agreement 1: one category only)."""

    value: float | None
    reason: str | None = None


class TwoRaterAgreement(BaseModel):
    """Two raters on the items both rated: the confusion matrix (rows ``a``, columns ``b``, in ``labels`` order),
    raw agreement, Cohen's κ and each rater's base rate (the share of items they put in the positive class:
    grade >= 1, or ``true``)."""

    a: str
    b: str
    n: int = Field(description="items both rated")
    labels: list[str]
    confusion: list[list[int]]
    raw_agreement: float | None = Field(description="share of items rated alike; None: n = 0")
    kappa: Kappa = Field(description="Cohen's κ (unweighted)")
    base_rate_a: float | None
    base_rate_b: float | None


class PairAgreement(TwoRaterAgreement):
    """Two annotators of a dataset: also the weighted κ (grades as ordered: linear and quadratic weights over
    the grades from the lowest to the highest given) and κ on relevant (grade >= 1) or not."""

    linear_kappa: Kappa
    quadratic_kappa: Kappa
    relevance_kappa: Kappa
    only_a: int = Field(description="items only a judged (not in n)")
    only_b: int


class GroupAgreement(BaseModel):
    """Every annotator at once, over the items all of them judged: Fleiss' κ and the mean pairwise agreement."""

    annotators: list[str]
    n: int
    fleiss_kappa: Kappa
    mean_pairwise_agreement: float | None


class Disagreement(BaseModel):
    """One (case, chunk) the annotators graded differently, with the label the rule gave it."""

    case_id: str
    chunk_id: str
    grades: dict[str, int] = Field(description="annotator -> grade (the adjudication left out)")
    label: int
    rule: str = Field(description="adjudicated | majority | tie_lower")
    adjudicated_by: str | None = None


class AgreementReport(BaseModel):
    """A dataset's annotator agreement (``rag-pipeline agreement``, ``GET …/datasets/{name}/agreement``)."""

    dataset: str
    version: str
    knowledge_base: str
    annotators: list[str]
    cases: int
    judged_cases: int = Field(description="cases with judgments")
    judgments: int
    items: int = Field(description="(case, chunk) pairs judged")
    rule: str = Field(description="how judgments become labels")
    resolutions: dict[str, int] = Field(description="items per rule that decided their label")
    pairs: list[PairAgreement]
    group: GroupAgreement | None = Field(description="three annotators or more; None otherwise")
    open_disagreements: int = Field(description="disagreements not adjudicated")
    disagreements: list[Disagreement] = Field(description="open ones first, then the adjudicated; at most 1000")
