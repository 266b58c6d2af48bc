"""Tests for rag_pipeline.evaluation.metrics: hand-computed cases, properties, and
agreement with the reference implementations pytrec_eval (trec_eval) and ranx."""

from __future__ import annotations

import math

import numpy as np
import pytest
import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st
from ranx import Qrels, Run, evaluate

from rag_pipeline.evaluation.metrics import (
    METRIC_NAMES,
    batch_metrics,
    evaluate_many,
    evaluate_retrieval,
)

IDS = [f"c{i}" for i in range(12)]
ids_st = st.sampled_from(IDS)
retrieved_st = st.lists(ids_st, max_size=16)  # duplicates, short and empty lists
binary_rel_st = st.sets(ids_st, min_size=1, max_size=8)
graded_rel_st = st.dictionaries(ids_st, st.integers(0, 3), min_size=1, max_size=8).filter(
    lambda d: any(g > 0 for g in d.values())
)
relevance_st = st.one_of(binary_rel_st, graded_rel_st)
k_st = st.integers(1, 12)
case_st = st.tuples(retrieved_st, relevance_st, k_st)
SETTINGS = settings(max_examples=150, deadline=None)


def test_seed_example() -> None:
    m = evaluate_retrieval(["c3", "c1", "c2"], {"c1", "c2"}, 3)
    assert m.precision_at_k == pytest.approx(2 / 3)
    assert m.recall_at_k == 1.0
    assert m.reciprocal_rank == 0.5
    dcg = 1 / math.log2(3) + 1 / math.log2(4)
    idcg = 1 + 1 / math.log2(3)
    assert m.ndcg_at_k == pytest.approx(dcg / idcg)
    assert m.ndcg_at_k == pytest.approx(0.6934264036)
    assert m.hit_at_k == 1.0
    assert m.average_precision_at_k == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert m.r_precision == 0.5
    assert tuple(m.model_dump()) == METRIC_NAMES


def test_short_list_precision_divides_by_k_and_duplicates_collapse() -> None:
    m = evaluate_retrieval(["a", "a", "b"], {"a"}, 5)
    assert m.precision_at_k == pytest.approx(1 / 5)
    assert m.recall_at_k == 1.0


@pytest.mark.parametrize("relevant", [set(), {}, {"a": 0}, {"a": -1.0}])
def test_no_relevant_raises(relevant) -> None:
    with pytest.raises(ValueError):
        evaluate_retrieval(["a"], relevant, 3)
    with pytest.raises(ValueError):
        evaluate_many([["a"]], [relevant], 3)


@pytest.mark.parametrize("k", [0, -1, 1.5, True, "3"])
def test_bad_k_raises(k) -> None:
    with pytest.raises(ValueError):
        evaluate_retrieval(["a"], {"a"}, k)
    with pytest.raises(ValueError):
        evaluate_many([["a"]], [{"a"}], k)


def test_batch_validation() -> None:
    gains, ideal = np.ones((2, 3)), np.ones((2, 1))
    with pytest.raises(ValueError):
        batch_metrics(gains, ideal, np.array([1, 0]))
    with pytest.raises(ValueError):
        batch_metrics(gains, np.array([[1.0], [0.0]]), 3)
    with pytest.raises(ValueError):
        batch_metrics(gains, np.array([[1.0, 2.0], [1.0, 0.0]]), 3)
    with pytest.raises(TypeError):
        evaluate_retrieval(["a"], "a", 1)


@SETTINGS
@given(case_st)
def test_metrics_in_unit_interval(case) -> None:
    for value in evaluate_retrieval(*case).model_dump().values():
        assert 0.0 <= value <= 1.0 + 1e-12


@SETTINGS
@given(relevance_st, k_st)
def test_perfect_ranking(relevant, k) -> None:
    grades = relevant if isinstance(relevant, dict) else dict.fromkeys(relevant, 1)
    ranked = sorted((d for d, g in grades.items() if g > 0), key=lambda d: -grades[d])
    m = evaluate_retrieval(ranked, relevant, k)
    assert m.reciprocal_rank == m.hit_at_k == m.r_precision == 1.0
    assert m.ndcg_at_k == pytest.approx(1.0, abs=1e-12)
    if k <= len(ranked):
        assert m.precision_at_k == 1.0
    if k >= len(ranked):
        assert m.recall_at_k == 1.0
        assert m.average_precision_at_k == pytest.approx(1.0, abs=1e-12)


@SETTINGS
@given(retrieved_st, binary_rel_st, st.data())
def test_appending_relevant_never_lowers_recall(retrieved, relevant, data) -> None:
    k = data.draw(st.integers(len(retrieved) + 1, 20))
    extra = data.draw(st.sampled_from(sorted(relevant)))
    before = evaluate_retrieval(retrieved, relevant, k).recall_at_k
    assert evaluate_retrieval([*retrieved, extra], relevant, k).recall_at_k >= before


def _assert_batch_matches(cases, batch) -> None:
    for name in METRIC_NAMES:
        expected = np.array([getattr(evaluate_retrieval(*c), name) for c in cases])
        np.testing.assert_allclose(batch[name], expected, rtol=0, atol=1e-12, err_msg=name)
        assert batch[name].dtype == np.float64


@SETTINGS
@given(st.lists(case_st, min_size=1, max_size=20))
def test_batch_equals_per_case_with_per_case_k(cases) -> None:
    retrieved, relevant, ks = zip(*cases)
    _assert_batch_matches(cases, evaluate_many(retrieved, relevant, list(ks)))


@SETTINGS
@given(st.lists(st.tuples(retrieved_st, relevance_st), min_size=1, max_size=20), k_st)
def test_batch_equals_per_case_with_scalar_k(pairs, k) -> None:
    retrieved, relevant = zip(*pairs)
    _assert_batch_matches([(r, q, k) for r, q in pairs], evaluate_many(retrieved, relevant, k))


def test_batch_metrics_on_wide_padding_and_empty_depth() -> None:
    gains = np.zeros((2, 50))
    gains[0, [1, 40]] = [2.0, 1.0]
    gains[1, 0] = 1.0
    ideal = np.array([[2.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    k = np.array([3, 60])
    out = batch_metrics(gains, ideal, k)
    pools = [["x", "a", *[f"n{i}" for i in range(38)], "b"], ["a"]]
    _assert_batch_matches([(pools[0], {"a": 2, "b": 1}, 3), (pools[1], {"a"}, 60)], out)
    empty = batch_metrics(np.zeros((2, 0)), ideal, 5)
    assert all(not v.any() for v in empty.values())
    assert all(v.shape == (0,) for v in evaluate_many([], [], 3).values())


def _random_cases(rng: np.random.Generator, n: int, graded: bool):
    """Random unique-id runs (some empty or short) with qrels incl. judged grade-0 ids."""
    cases = []
    for _ in range(n):
        pool = [f"d{i}" for i in rng.permutation(40)]
        n_rel = int(rng.integers(1, 9))
        grades = rng.integers(1, 4, n_rel) if graded else np.ones(n_rel, int)
        qrels = {doc: int(g) for doc, g in zip(pool[:n_rel], grades)}
        qrels.update(dict.fromkeys(pool[n_rel:n_rel + 3], 0))
        depth = int(rng.integers(0, 25))
        cases.append(([str(d) for d in rng.permutation(pool[:30])[:depth]], qrels))
    return cases


CUTOFFS = (1, 3, 5, 10, 20)


@pytest.mark.slow  # ranx's numba JIT
@pytest.mark.filterwarnings("ignore:unsafe cast from uint64 to int64")  # ranx/numba internals
@pytest.mark.parametrize("graded", [False, True])
def test_agrees_with_pytrec_eval_and_ranx(graded: bool) -> None:
    cases = _random_cases(np.random.default_rng(7 + graded), 600, graded)
    qids = [f"q{i:04d}" for i in range(len(cases))]
    qrels = {q: rel for q, (_, rel) in zip(qids, cases)}
    run = {q: {d: float(len(ids) - r) for r, d in enumerate(ids)} for q, (ids, _) in zip(qids, cases)}
    cut = ",".join(map(str, CUTOFFS))
    measures = {f"P.{cut}", f"recall.{cut}", f"ndcg_cut.{cut}", f"map_cut.{cut}", "Rprec"}
    trec = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    ranx_run = Run({q: r for q, r in run.items() if r})
    ranx_qrels = Qrels({q: qrels[q] for q, r in run.items() if r})
    retrieved, relevant = [ids for ids, _ in cases], [rel for _, rel in cases]
    pairs = {"P": "precision_at_k", "recall": "recall_at_k", "ndcg_cut": "ndcg_at_k"}
    pairs["map_cut"] = "average_precision_at_k"
    for k in CUTOFFS:
        ours = evaluate_many(retrieved, relevant, k)
        evaluate(ranx_qrels, ranx_run, f"mrr@{k}")
        for i, q in enumerate(qids):
            if not run[q]:  # trec_eval and ranx skip empty runs; every metric is 0 then
                assert all(ours[name][i] == 0.0 for name in METRIC_NAMES)
                continue
            for trec_name, name in pairs.items():
                assert abs(ours[name][i] - trec[q][f"{trec_name}_{k}"]) <= 1e-9, (q, k, name)
            assert abs(ours["r_precision"][i] - trec[q]["Rprec"]) <= 1e-9
            assert abs(ours["reciprocal_rank"][i] - ranx_run.scores[f"mrr@{k}"][q]) <= 1e-9


def test_a_nested_metrics_field_is_written_and_read_as_the_metric_keys_in_its_place() -> None:
    from rag_pipeline.contracts.tuning import RankedFusion

    m = evaluate_retrieval(["c3", "c1", "c2"], {"c1", "c2"}, 3)
    flat = {"rank": 1, "fusion": "rrf", "normalization": "none", "vector_weight": 1.0, "keyword_weight": 1.0,
            "rrf_k": 60, "label": "rrf", **m.model_dump(), "folds_chosen": 2, "is_base": True, "is_recommended": False}
    ranked = RankedFusion.model_validate(flat)
    assert ranked.metrics == m
    assert ranked.model_dump() == flat and list(ranked.model_dump()) == list(flat)
    assert list(RankedFusion.model_json_schema()["properties"]) == list(flat)
    assert RankedFusion.model_validate_json(ranked.model_dump_json()) == ranked
