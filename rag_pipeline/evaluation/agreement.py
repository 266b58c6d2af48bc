"""Agreement between raters (docs/metrics.md, "Agreement"): Cohen's κ (unweighted, linear, quadratic), Fleiss' κ,
raw agreement and base rates; a dataset's annotator report with its disagreements for adjudication. Checked
against scikit-learn's ``cohen_kappa_score`` and statsmodels' ``fleiss_kappa``."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence
from typing import Literal

import numpy as np

from rag_pipeline.contracts.agreement import (
    AgreementReport,
    Disagreement,
    GroupAgreement,
    Kappa,
    PairAgreement,
    TwoRaterAgreement,
)
from rag_pipeline.contracts.dataset import RELEVANT_GRADE
from rag_pipeline.evaluation.datasets.judgments import Judgment, resolve_chunk
from rag_pipeline.evaluation.datasets.load import Dataset

Weights = Literal["none", "linear", "quadratic"]
RULE = ("adjudicated grade, else the grade every annotator gave, else the grade most gave, else the lower of the "
        "tied grades")
MAX_DISAGREEMENTS = 1000
NO_ITEMS = "no item rated by both"


def confusion(a: Sequence[Hashable], b: Sequence[Hashable], labels: Sequence[Hashable]) -> np.ndarray:
    """Counts of (a's label, b's label), rows and columns in ``labels`` order."""
    index = {label: i for i, label in enumerate(labels)}
    matrix = np.zeros((len(labels), len(labels)), dtype=np.int64)
    for x, y in zip(a, b, strict=True):
        matrix[index[x], index[y]] += 1
    return matrix


def cohen_kappa(matrix: np.ndarray, weights: Weights = "none") -> Kappa:
    """Cohen's κ of a confusion matrix whose categories are ordered (the weights use the index distance):
    1 − Σ w·observed / Σ w·expected, expected from the two raters' marginals."""
    n = int(matrix.sum())
    if n == 0:
        return Kappa(value=None, reason=NO_ITEMS)
    size = matrix.shape[0]
    distance = np.abs(np.subtract.outer(np.arange(size), np.arange(size))).astype(float)
    w = {"none": (distance > 0).astype(float), "linear": distance, "quadratic": distance ** 2}[weights]
    observed = matrix / n
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0))
    chance = float((w * expected).sum())
    if chance == 0.0:
        return Kappa(value=None, reason="chance agreement is 1 (both raters used one and the same category "
                                        "only): κ is undefined")
    return Kappa(value=1.0 - float((w * observed).sum()) / chance)


def fleiss_kappa(counts: np.ndarray) -> Kappa:
    """Fleiss' κ of an items × categories table of counts, every row summing to the same number of raters m ≥ 2:
    (P̄ − Pₑ) / (1 − Pₑ), P̄ the mean share of agreeing rater pairs per item, Pₑ = Σ pⱼ²."""
    if counts.shape[0] == 0:
        return Kappa(value=None, reason="no item rated by every annotator")
    m = int(counts[0].sum())
    if m < 2 or np.any(counts.sum(axis=1) != m):
        raise ValueError("every item needs the same number (>= 2) of ratings")
    p = counts.sum(axis=0) / counts.sum()
    p_bar = float(((counts * (counts - 1)).sum(axis=1) / (m * (m - 1))).mean())
    p_e = float((p ** 2).sum())
    if p_e == 1.0:
        return Kappa(value=None, reason="every rating is one category: chance agreement is 1, κ is undefined")
    return Kappa(value=(p_bar - p_e) / (1.0 - p_e))


def two_raters(a_name: str, b_name: str, a: Sequence[Hashable], b: Sequence[Hashable],
               labels: Sequence[Hashable], positive: Sequence[Hashable]) -> TwoRaterAgreement:
    """Raw agreement, Cohen's κ, base rates (share in ``positive``) and the confusion matrix of paired ratings."""
    matrix = confusion(a, b, labels)
    n = len(a)
    return TwoRaterAgreement(
        a=a_name, b=b_name, n=n, labels=[str(x) for x in labels], confusion=matrix.tolist(),
        raw_agreement=float(np.trace(matrix)) / n if n else None, kappa=cohen_kappa(matrix),
        base_rate_a=sum(x in positive for x in a) / n if n else None,
        base_rate_b=sum(x in positive for x in b) / n if n else None)


def _pair(a_name: str, b_name: str, a: dict, b: dict) -> PairAgreement:
    common = sorted(set(a) & set(b))
    xs, ys = [a[i] for i in common], [b[i] for i in common]
    grades = list(range(min(xs + ys), max(xs + ys) + 1)) if common else []
    base = two_raters(a_name, b_name, xs, ys, grades, [g for g in grades if g >= RELEVANT_GRADE])
    matrix = np.array(base.confusion, dtype=np.int64).reshape(len(grades), len(grades))
    relevant = confusion([x >= RELEVANT_GRADE for x in xs], [y >= RELEVANT_GRADE for y in ys], [False, True])
    return PairAgreement(**base.model_dump(), linear_kappa=cohen_kappa(matrix, "linear"),
                         quadratic_kappa=cohen_kappa(matrix, "quadratic"), relevance_kappa=cohen_kappa(relevant),
                         only_a=len(set(a) - set(b)), only_b=len(set(b) - set(a)))


def _group(names: list[str], by_rater: dict[str, dict]) -> GroupAgreement:
    common = sorted(set.intersection(*(set(by_rater[n]) for n in names)))
    grades = sorted({by_rater[n][i] for n in names for i in common})
    counts = np.array([[sum(by_rater[n][i] == g for n in names) for g in grades] for i in common],
                      dtype=np.int64).reshape(len(common), len(grades))
    m = len(names)
    agreeing = ((counts * (counts - 1)).sum(axis=1) / (m * (m - 1))) if common else np.array([])
    return GroupAgreement(annotators=names, n=len(common), fleiss_kappa=fleiss_kappa(counts),
                          mean_pairwise_agreement=float(agreeing.mean()) if common else None)


def agreement_report(dataset: Dataset) -> AgreementReport:
    """The annotators' agreement on ``dataset``: per pair, all together (three or more), the label rules used
    and every item they disagree on. An adjudicated judgment settles a label and is left out of the figures."""
    by_rater: dict[str, dict[tuple[str, str], int]] = defaultdict(dict)
    items: dict[tuple[str, str], list[Judgment]] = defaultdict(list)
    for case in dataset.cases:
        for j in case.annotator_judgments:
            items[case.case_id, j.chunk_id].append(j)
            if not j.adjudicated:
                by_rater[j.annotator][case.case_id, j.chunk_id] = j.grade
    names = sorted(by_rater)
    rules: Counter[str] = Counter()
    disagreements: list[Disagreement] = []
    for (case_id, chunk_id), judged in items.items():
        resolution = resolve_chunk(judged)
        rules[resolution.rule] += 1
        grades = {j.annotator: j.grade for j in judged if not j.adjudicated}
        if len(set(grades.values())) > 1:
            settled = next((j.annotator for j in judged if j.adjudicated), None)
            disagreements.append(Disagreement(case_id=case_id, chunk_id=chunk_id, grades=dict(sorted(grades.items())),
                                              label=resolution.grade, rule=resolution.rule, adjudicated_by=settled))
    disagreements.sort(key=lambda d: d.adjudicated_by is not None)
    return AgreementReport(
        dataset=dataset.name, version=dataset.version, knowledge_base=dataset.knowledge_base, annotators=names,
        cases=len(dataset.cases), judged_cases=sum(bool(c.annotator_judgments) for c in dataset.cases),
        judgments=sum(len(v) for v in items.values()), items=len(items), rule=RULE,
        resolutions=dict(sorted(rules.items())),
        pairs=[_pair(a, b, by_rater[a], by_rater[b]) for a, b in itertools.combinations(names, 2)],
        group=_group(names, by_rater) if len(names) >= 3 else None,
        open_disagreements=sum(d.adjudicated_by is None for d in disagreements),
        disagreements=disagreements[:MAX_DISAGREEMENTS])
