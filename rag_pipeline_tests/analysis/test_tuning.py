"""Tests for rag_pipeline.evaluation.pools and analysis.tuning (sweep, chart) (pure; one database round trip)."""

from __future__ import annotations

import base64
import math
import uuid

import numpy as np
import pytest
import sqlalchemy as sa
import yaml

from rag_pipeline.analysis.tuning.chart import markdown_image, plot_sweep, sweep_markdown
from rag_pipeline.analysis.tuning.sweep import (
    FusionConfig,
    assign_folds,
    cross_validate,
    expressible_configs,
    grid,
    recommend,
    sweep,
)
from rag_pipeline.evaluation.metrics import METRIC_NAMES, evaluate_many
from rag_pipeline.evaluation.pools import (
    evaluate_fusion,
    load_pools,
    pool_recall,
    pools_from_rows,
    recall_ceiling,
)
from rag_pipeline.retrieval.fusion import fuse, order
from rag_pipeline.retrieval.strategies import (
    PACKAGED_STRATEGIES_FILE,
    Strategy,
    parse_registry,
    strategy_from_mapping,
    strategy_to_yaml,
)
from rag_pipeline.storage.evaluation_tables import (
    RetrievalEvaluationCandidate,
    RetrievalEvaluationCaseResult,
    RetrievalEvaluationDataset,
    RetrievalEvaluationRun,
)
from rag_pipeline.storage.tables import KnowledgeBase
from rag_pipeline_tests.eval_helpers import fused_ranks, pool_subset

NAN = np.nan
VECTOR_ONLY = FusionConfig("weighted", "none", 1.0, 0.0)
KEYWORD_ONLY = FusionConfig("weighted", "none", 0.0, 1.0)


def _strategy(version: str = "pool-v1", **fusion) -> Strategy:
    return Strategy(version=version, vector_candidate_k=100, keyword_candidate_k=100, **fusion)


def _leg_ranks(scores: np.ndarray, ids: list[str]) -> np.ndarray:
    """1-based leg ranks (score desc, chunk id asc), NaN where the leg is missing."""
    present = np.flatnonzero(~np.isnan(scores))
    ranked = present[np.lexsort((np.array(ids, dtype=object)[present].astype(str),
                                 -scores[present]))]
    ranks = np.full(scores.shape, NAN)
    ranks[ranked] = np.arange(1, ranked.size + 1)
    return ranks


def _none(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def _case_rows(case_id: str, strategy, vector, keyword, ids, relevant, k=3) -> tuple[list, dict]:
    """Candidate rows of one case ranked the way a run stores them (fusion.fuse + fusion.order)."""
    vector, keyword = np.asarray(vector, float), np.asarray(keyword, float)
    vr, kr = _leg_ranks(vector, ids), _leg_ranks(keyword, ids)
    final = fuse(strategy, vector, keyword, vr, kr)
    rank = np.empty(len(ids), dtype=int)
    rank[order(final, vector, ids)] = np.arange(1, len(ids) + 1)
    rows = [{"case_id": case_id, "chunk_id": ids[j], "rank": int(rank[j]),
             "vector_score": _none(vector[j]), "vector_rank": _none(vr[j]),
             "keyword_score": _none(keyword[j]), "keyword_rank": _none(kr[j]),
             "final_score": float(final[j]), "is_relevant": ids[j] in relevant,
             "strategy_version": getattr(strategy, "version", None)} for j in range(len(ids))]
    return rows, {"case_id": case_id, "k": k, "relevant_chunk_ids": list(relevant)}


def _random_rows(strategy, n_cases: int = 40, seed: int = 0) -> tuple[list, list]:
    """Random pools with ties, missing legs, varying sizes and relevant chunks outside the pool."""
    rng = np.random.default_rng(seed)
    rows, cases = [], []
    for i in range(n_cases):
        size = int(rng.integers(1, 30))
        ids = [str(uuid.UUID(int=int(x))) for x in rng.integers(0, 2**62, size)]
        vector = np.round(rng.normal(0.5, 0.2, size), 1)  # coarse -> ties
        keyword = np.round(rng.exponential(2.0, size), 0)
        vector[rng.random(size) < 0.3] = NAN
        keyword[~np.isnan(vector) & (rng.random(size) < 0.4)] = NAN
        relevant = [ids[j] for j in range(size) if rng.random() < 0.2] + [f"outside-{i}"]
        case_rows, case = _case_rows(f"c{i:03d}", strategy, vector, keyword, ids, relevant,
                                     k=int(rng.integers(1, 12)))
        rows += case_rows
        cases.append(case)
    rng.shuffle(rows)  # row order must not matter
    return rows, cases


OWN_STRATEGIES = [
    _strategy(fusion="weighted", normalization=norm, vector_weight=0.7, keyword_weight=0.3)
    for norm in ("none", "minmax", "zscore", "rank", "dbsf")
] + [_strategy(fusion="rrf", vector_weight=1.0, keyword_weight=1.0, rrf_k=60)]


@pytest.mark.parametrize("strategy", OWN_STRATEGIES, ids=lambda s: f"{s.fusion}-{s.normalization}")
def test_refusing_with_own_strategy_reproduces_stored_ranks_and_metrics(strategy) -> None:
    rows, cases = _random_rows(strategy)
    pools = pools_from_rows(rows, cases)
    np.testing.assert_array_equal(fused_ranks(pools, strategy), pools.stored_rank)
    np.testing.assert_array_equal(fused_ranks(pools, FusionConfig.from_strategy(strategy)),
                                  pools.stored_rank)
    # Metrics of the stored ranking, computed from id lists like a run does.
    retrieved = [[str(c) for c in pools.chunk_ids[i, pools.mask[i]]] for i in range(pools.n_cases)]
    expected = evaluate_many(retrieved, [set(c["relevant_chunk_ids"]) for c in cases],
                             [c["k"] for c in cases])
    got = evaluate_fusion(pools, strategy)
    for name in METRIC_NAMES:
        np.testing.assert_allclose(got[name], expected[name], rtol=0, atol=1e-15)


def test_sweep_fast_path_equals_evaluate_fusion_exactly() -> None:
    pools = pools_from_rows(*_random_rows(OWN_STRATEGIES[0], n_cases=60, seed=3))
    result = sweep(pools)
    for i, config in enumerate(result.configs):
        single = evaluate_fusion(pools, config)
        for name in METRIC_NAMES:
            np.testing.assert_array_equal(result.per_case[name][i], single[name], strict=True)


def test_grid_contents() -> None:
    configs = grid()
    assert len(configs) == 5 * 21 + 7 == len(set(configs))
    assert VECTOR_ONLY in configs and KEYWORD_ONLY in configs
    assert FusionConfig("weighted", "minmax", 0.3, 0.7) in configs  # exact decimals
    assert [c.rrf_k for c in configs if c.fusion == "rrf"] == [1, 5, 10, 20, 40, 60, 80]
    assert VECTOR_ONLY.label == "weighted none 1.00/0.00 (vector only)"


# Hand example: A v=0.9 (r1) k=1 (r3); B v=0.8 (r2) k=-; C v=0.1 (r3) k=3 (r2); D v=- k=8 (r1).
# Weights 0.5 / 0.5. Vector: mean 0.6, population std s_v = sqrt(0.38/3); keyword: mean 4,
# s_k = sqrt(26/3). The expected finals are written out from those statistics.
S_V, S_K = math.sqrt(0.38 / 3), math.sqrt(26 / 3)
HAND = {
    "none": ([0.5 * 0.9 + 0.5 * 1, 0.5 * 0.8, 0.5 * 0.1 + 0.5 * 3, 0.5 * 8], "DCAB"),
    # vector (v-0.1)/0.8, keyword (k-1)/7; A and D tie at 0.5 -> A has a vector score.
    "minmax": ([0.5, 0.5 * 0.875, 0.5 * 2 / 7, 0.5], "ADBC"),
    "zscore": ([0.5 * (0.3 / S_V) + 0.5 * (-3 / S_K), 0.5 * (0.2 / S_V),
                0.5 * (-0.5 / S_V) + 0.5 * (-1 / S_K), 0.5 * (4 / S_K)], "DBAC"),
    # Borda (n - r + 1) / n with n = 3 in both legs; C and D tie at 0.5 -> C has a vector score.
    "rank": ([0.5 * 1 + 0.5 / 3, 0.5 * 2 / 3, 0.5 / 3 + 0.5 * 2 / 3, 0.5], "ACDB"),
    "dbsf": ([0.5 * (0.3 + 3 * S_V) / (6 * S_V) + 0.5 * (-3 + 3 * S_K) / (6 * S_K),
              0.5 * (0.2 + 3 * S_V) / (6 * S_V),
              0.5 * (-0.5 + 3 * S_V) / (6 * S_V) + 0.5 * (-1 + 3 * S_K) / (6 * S_K),
              0.5 * (4 + 3 * S_K) / (6 * S_K)], "ADCB"),
    "rrf": ([1 / 61 + 1 / 63, 1 / 62, 1 / 63 + 1 / 62, 1 / 61], "ACDB"),
}


@pytest.mark.parametrize("method", list(HAND))
def test_each_normalisation_hand_example_through_evaluate_fusion(method: str) -> None:
    expected_final, expected_order = HAND[method]
    config = (FusionConfig("rrf", "none", 1.0, 1.0, 60) if method == "rrf"
              else FusionConfig("weighted", method, 0.5, 0.5))
    ids = ["A", "B", "C", "D"]
    vector, keyword = [0.9, 0.8, 0.1, NAN], [1.0, NAN, 3.0, 8.0]
    rows, cases = [], []
    for chunk in ids:  # one case per relevant chunk: its reciprocal rank reveals its position
        case_rows, case = _case_rows(f"rel-{chunk}", config, vector, keyword, ids, [chunk], k=4)
        rows += case_rows
        cases.append(case)
    pools = pools_from_rows(rows, cases)
    assert "".join(pools.chunk_ids[0]) == expected_order  # slots follow the stored rank
    by_chunk = dict(zip(pools.chunk_ids[0], pools.stored_final[0]))
    np.testing.assert_allclose([by_chunk[c] for c in ids], expected_final, rtol=1e-12)
    got = evaluate_fusion(pools, config)
    positions = [expected_order.index(chunk) + 1 for chunk in ids]
    np.testing.assert_allclose(got["reciprocal_rank"], [1 / p for p in positions], rtol=1e-15)
    np.testing.assert_allclose(got["ndcg_at_k"], [1 / math.log2(p + 1) for p in positions],
                               rtol=1e-15)
    np.testing.assert_array_equal(got["hit_at_k"], [1.0] * 4)


def _vector_keyword_dataset(kinds: str) -> object:
    """One case per letter: 'V' cases are solved only by the vector leg, 'K' only by keyword.

    Each pool holds the relevant chunk R and a distractor D; k = 1, so nDCG@1 is 1 when the
    right leg decides and 0 otherwise.
    """
    rows, cases = [], []
    for i, kind in enumerate(kinds):
        vector, keyword = ([0.9, 0.2], [1.0, 5.0]) if kind == "V" else ([0.2, 0.9], [5.0, 1.0])
        case_rows, case = _case_rows(f"{kind}{i:02d}", VECTOR_ONLY, vector, keyword,
                                     [f"R{i:02d}", f"D{i:02d}"], [f"R{i:02d}"], k=1)
        rows += case_rows
        cases.append(case)
    return pools_from_rows(rows, cases)


def test_cross_validation_never_uses_a_folds_own_cases() -> None:
    # Fold 0 is mostly V, fold 1 mostly K; overall V wins 11 : 9.
    kinds = "VVVVVVVKKK" + "VVVVKKKKKK"
    fold_of = np.array([0] * 10 + [1] * 10)
    pools = _vector_keyword_dataset(kinds)
    configs = (KEYWORD_ONLY, VECTOR_ONLY)
    cv = cross_validate(pools, "ndcg_at_k", configs=configs, fold_of=fold_of)
    # Each fold gets the choice of the *other* fold, which is wrong for its majority.
    assert cv.chosen == (KEYWORD_ONLY, VECTOR_ONLY)
    for fold, chosen in enumerate(cv.chosen):
        independent = sweep(pool_subset(pools, fold_of != fold), configs=configs).best_config
        assert chosen == independent
    assert cv.recommended == VECTOR_ONLY and cv.in_sample_mean == pytest.approx(11 / 20)
    assert cv.mean == pytest.approx((3 + 4) / 20)
    assert cv.mean < cv.in_sample_mean
    np.testing.assert_array_equal(cv.out_of_fold, [0.0] * 7 + [1.0] * 3 + [1.0] * 4 + [0.0] * 6)

    # Flipping every case of fold 0 changes fold 1's choice but never fold 0's own.
    flipped = _vector_keyword_dataset("KKKKKKKVVV" + kinds[10:])
    again = cross_validate(flipped, "ndcg_at_k", configs=configs, fold_of=fold_of)
    assert again.chosen == (KEYWORD_ONLY, KEYWORD_ONLY)


def test_cross_validation_folds_match_independent_sweeps_on_the_grid() -> None:
    pools = pools_from_rows(*_random_rows(OWN_STRATEGIES[1], n_cases=50, seed=5))
    cv = cross_validate(pools, "ndcg_at_k", folds=5, seed=2)
    np.testing.assert_array_equal(cv.fold_of, assign_folds(50, 5, 2))
    assert np.bincount(cv.fold_of).tolist() == [10] * 5
    for fold, chosen in enumerate(cv.chosen):
        train = pool_subset(pools, cv.fold_of != fold)
        assert chosen == sweep(train).best_config
        test = cv.fold_of == fold
        np.testing.assert_array_equal(cv.out_of_fold[test],
                                      evaluate_fusion(pool_subset(pools, test), chosen)["ndcg_at_k"])
    assert cv.ci[0] <= cv.mean <= cv.ci[1]
    with pytest.raises(ValueError, match="folds"):
        assign_folds(3, 5)


def test_recall_ceiling_hand_example() -> None:
    rows, cases = [], []
    for case_id, ids, relevant in (("a", ["x1", "x2"], ["x1", "gone"]),  # 1 of 2 in the pool
                                   ("b", ["y1", "y2"], ["y2"]),          # 1 of 1
                                   ("c", ["z1"], ["m1", "m2", "m3"])):   # 0 of 3
        case_rows, case = _case_rows(case_id, VECTOR_ONLY, [0.5] * len(ids), [NAN] * len(ids),
                                     ids, relevant)
        rows += case_rows
        cases.append(case)
    pools = pools_from_rows(rows, cases)
    np.testing.assert_array_equal(pool_recall(pools), [0.5, 1.0, 0.0])
    assert recall_ceiling(pools) == 0.5
    assert pools.n_relevant.tolist() == [2, 1, 3]
    # No fusion reaches more than the ceiling.
    assert sweep(pools, "recall_at_k").per_case["recall_at_k"].mean(axis=1).max() <= 0.5


def _known_best_pools(pool_version: str = "pool-v1"):
    """Only weighted none at vector weight 0.30 ranks R first in both cases (k = 1).

    Both legs are present for R and D, raw scores: case L wants w > 0.275
    (R - D = 0.725 w - 0.275 (1 - w)), case H wants w < 0.325 (R - D = 0.325 (1 - w) - 0.675 w).
    With two chunks minmax / zscore / rank / dbsf see (1, 0) vs (0, 1) patterns and RRF a
    rank tie, so none of them can win both cases.
    """
    base = _strategy(pool_version, fusion="weighted", normalization="none",
                     vector_weight=0.7, keyword_weight=0.3)
    rows, cases = [], []
    for case_id, vector, keyword in (("L", [0.9, 0.175], [0.1, 0.375]),
                                     ("H", [0.1, 0.775], [0.7, 0.375])):
        case_rows, case = _case_rows(case_id, base, vector, keyword, [f"R{case_id}", f"D{case_id}"],
                                     [f"R{case_id}"], k=1)
        rows += case_rows
        cases.append(case)
    return base, pools_from_rows(rows, cases)


def test_sweep_returns_the_best_configuration_known_by_construction() -> None:
    _, pools = _known_best_pools()
    result = sweep(pools)
    assert result.best_config == FusionConfig("weighted", "none", 0.3, 0.7)
    means = result.means
    assert means[result.best_index] == 1.0
    assert np.count_nonzero(means == 1.0) == 1
    rows = result.rows()
    assert len(rows) == len(grid()) and rows[result.best_index]["ndcg_at_k"] == 1.0


def test_recommend_emits_a_strategy_that_loads_back() -> None:
    base, pools = _known_best_pools()
    rec = recommend(pools, base, "ndcg_at_k", folds=2, n_resamples=200)
    expected = base.replace(version="pool-v1-tuned-ndcg_at_k",
                            description=rec.strategy.description, fusion="weighted",
                            normalization="none", vector_weight=0.3, keyword_weight=0.7)
    assert rec.strategy == expected
    assert rec.predicted_mean == 1.0 and rec.base_mean == 0.5  # base 0.7/0.3 solves only L
    loaded = parse_registry(yaml.safe_load("strategies:\n" + rec.yaml))
    assert loaded == {expected.version: expected}
    assert loaded[expected.version].params_hash() == expected.params_hash()
    # Pasted at the end of the packaged registry, it loads there too.
    packaged = PACKAGED_STRATEGIES_FILE.read_text(encoding="utf-8")
    registry = parse_registry(yaml.safe_load(packaged.rstrip("\n") + "\n\n" + rec.yaml))
    assert registry[expected.version] == expected
    summary = rec.summary()
    assert summary["recommended"] == "weighted none 0.30/0.70" and summary["cases"] == 2
    # An RRF configuration renders and loads back as well.
    rrf = FusionConfig("rrf", "none", 1.0, 1.0, 20).apply_to(base, "x-rrf")
    entry = yaml.safe_load("strategies:\n" + strategy_to_yaml(rrf))["strategies"][0]
    assert strategy_from_mapping(entry) == rrf
    with pytest.raises(ValueError, match="stored by 'other-v1'"):
        recommend(_known_best_pools("other-v1")[1], base)


def test_expressible_configs_skip_a_disabled_leg() -> None:
    keyword_pool = Strategy(version="kw", vector_candidate_k=0, keyword_candidate_k=100,
                            vector_weight=0.0, keyword_weight=1.0)
    configs = expressible_configs(keyword_pool)
    assert VECTOR_ONLY not in configs and KEYWORD_ONLY in configs
    assert len(configs) == len(grid()) - 5  # vector weight 1.0 for each normalisation


def test_pools_from_rows_layout_and_validation() -> None:
    strategy = OWN_STRATEGIES[0]
    rows, cases = _random_rows(strategy, n_cases=5)
    cases.append({"case_id": "empty", "k": 3, "relevant_chunk_ids": ["nowhere"]})
    pools = pools_from_rows(rows, cases)
    assert pools.case_ids[-1] == "empty" and not pools.mask[-1].any()
    assert pools.strategy_version == "pool-v1"
    assert evaluate_fusion(pools, strategy)["recall_at_k"][-1] == 0.0
    flat = pools.chunk_ids[pools.mask].astype(str)
    assert np.array_equal(np.argsort(pools.chunk_rank[pools.mask], kind="stable"),
                          np.argsort(flat, kind="stable"))
    valid = pools.stored_rank[pools.mask]
    assert valid.min() == 1 and np.all(np.diff(pools.stored_rank, axis=1)[pools.mask[:, 1:]] == 1)
    assert pool_subset(pools, [1, 0]).case_ids.tolist() == [cases[1]["case_id"], cases[0]["case_id"]]
    with pytest.raises(ValueError, match="no case result"):
        pools_from_rows(rows, cases[1:])
    bad = [dict(r) for r in rows]
    bad[0]["is_relevant"] = not bad[0]["is_relevant"]
    with pytest.raises(ValueError, match="is_relevant"):
        pools_from_rows(bad, cases)
    with pytest.raises(ValueError, match="no relevant chunk"):
        pools_from_rows([], [{"case_id": "x", "k": 1, "relevant_chunk_ids": []}])


def test_plot_and_markdown() -> None:
    base, pools = _known_best_pools()
    result = sweep(pools)
    png = plot_sweep(result, base=FusionConfig.from_strategy(base))
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
    text = markdown_image(png)
    assert text.startswith("![sweep](data:image/png;base64,") and text.endswith(")")
    assert base64.b64decode(text[len("![sweep](data:image/png;base64,"):-1]) == png
    assert sweep_markdown(result).startswith("![sweep](data:image/png;base64,iVBOR")


def test_load_pools_round_trip(engine) -> None:
    """The two SQL queries read back what pools_from_rows builds from the same rows."""
    strategy = OWN_STRATEGIES[2]
    rows, cases = _random_rows(strategy, n_cases=6, seed=9)
    kb_id, dataset_id, run_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    inserts = [
        (KnowledgeBase, [{"id": kb_id, "name": f"tuning-{kb_id}", "chunk_size": 500,
                          "chunk_overlap": 0}]),
        (RetrievalEvaluationDataset, [{"id": dataset_id, "name": "d", "knowledge_base_name": "kb",
                                       "content_hash": "h", "case_count": 0, "cases": []}]),
        (RetrievalEvaluationRun, [{"id": run_id, "dataset_id": dataset_id,
                                   "knowledge_base_id": kb_id, "strategy_version": "pool-v1",
                                   "params_hash": "h", "strategy_params": {}}]),
        (RetrievalEvaluationCaseResult, [
            {**c, "evaluation_run_id": run_id, "case_index": i, "question": "q",
             "retrieved_chunk_ids": [], **dict.fromkeys(METRIC_NAMES, 0.0)}
            for i, c in enumerate(cases)]),
        (RetrievalEvaluationCandidate, [
            {**r, "evaluation_run_id": run_id, "document_id": uuid.uuid4(), "document_name": "doc",
             "is_selected": False, "vector_rank": _int(r["vector_rank"]),
             "keyword_rank": _int(r["keyword_rank"])} for r in rows]),
    ]
    with engine.connect() as conn:
        transaction = conn.begin()
        try:
            for model, values in inserts:
                conn.execute(sa.insert(model.__table__), values)
            loaded = load_pools(conn, run_id)
        finally:
            transaction.rollback()
    expected = pools_from_rows(rows, cases)
    for name in ("vector_score", "keyword_score", "vector_rank", "keyword_rank", "mask",
                 "chunk_rank", "gains", "stored_rank", "stored_final", "n_relevant", "k"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(expected, name), err_msg=name)
    assert loaded.case_ids.tolist() == expected.case_ids.tolist()
    np.testing.assert_array_equal(fused_ranks(loaded, strategy), loaded.stored_rank)


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)
