"""Tests for rag_pipeline.retrieval.fusion: hand examples, tie-break, batch == 1-D exactly."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from rag_pipeline.retrieval.fusion import (
    NORMALIZATIONS,
    TIE_BREAK,
    fuse,
    fuse_batch,
    normalize,
    normalize_batch,
    order,
    order_batch,
    rrf_fusion_batch,
    weighted_fusion_batch,
)
from rag_pipeline.retrieval.strategies import Strategy

NAN = np.nan


def test_seed_example_weighted_none() -> None:
    seed = Strategy(version="hybrid-v1")
    assert fuse(seed, [0.8123], [0.5])[0] == pytest.approx(0.71861, abs=1e-12)
    assert round(float(fuse(seed, [0.8123], [0.5])[0]), 4) == 0.7186
    # A missing leg scores 0.
    np.testing.assert_allclose(fuse(seed, [0.8123, NAN], [NAN, 0.5]), [0.7 * 0.8123, 0.15])


def test_normalize_none_and_minmax() -> None:
    np.testing.assert_array_equal(normalize([0.3, NAN, -1.0], "none"), [0.3, NAN, -1.0])
    np.testing.assert_allclose(normalize([1.0, 2.0, NAN, 3.0], "minmax"), [0.0, 0.5, NAN, 1.0])
    np.testing.assert_array_equal(normalize([0.4, NAN, 0.4], "minmax"), [1.0, NAN, 1.0])
    np.testing.assert_array_equal(normalize([0.4], "minmax"), [1.0])
    np.testing.assert_array_equal(normalize([NAN, NAN], "minmax"), [NAN, NAN])


def test_normalize_zscore() -> None:
    # mean 2, population std sqrt(2/3) -> +-sqrt(3/2)
    np.testing.assert_allclose(normalize([1.0, NAN, 2.0, 3.0], "zscore"),
                               [-np.sqrt(1.5), NAN, 0.0, np.sqrt(1.5)], rtol=1e-15, atol=1e-15)
    np.testing.assert_array_equal(normalize([0.1, 0.1, 0.1], "zscore"), [0.0, 0.0, 0.0])


def test_normalize_dbsf() -> None:
    # [0, 10]: mean 5, std 5 -> window [-10, 20] of width 30: 0 -> 1/3, 10 -> 2/3.
    np.testing.assert_allclose(normalize([0.0, 10.0, NAN], "dbsf"), [1 / 3, 2 / 3, NAN], rtol=1e-15)
    # Outliers clip: 9 values at 0 and one at 100 -> mean 10, std 30 -> window [-80, 100].
    values = [0.0] * 9 + [100.0]
    np.testing.assert_allclose(normalize(values, "dbsf"), [80 / 180] * 9 + [1.0], rtol=1e-15)
    np.testing.assert_array_equal(normalize([0.7, 0.7], "dbsf"), [1.0, 1.0])


def test_normalize_rank_borda() -> None:
    # Deepest rank present is 4 -> (4 - r + 1) / 4.
    scores = [0.9, NAN, 0.5, 0.1, 0.7]
    ranks = [1, 0, 3, 4, 2]
    np.testing.assert_allclose(normalize(scores, "rank", ranks), [1.0, NAN, 0.5, 0.25, 0.75])
    with pytest.raises(ValueError, match="rank"):
        normalize(scores, "rank")
    with pytest.raises(ValueError, match="1-based rank"):
        normalize([0.9, 0.5], "rank", [1, 0])


def test_unknown_normalization_and_bad_scores() -> None:
    with pytest.raises(ValueError, match="unknown normalization 'l2'"):
        normalize([1.0], "l2")
    with pytest.raises(ValueError, match="finite"):
        normalize([np.inf], "minmax")


def test_weighted_fusion_minmax_example() -> None:
    # vector minmax: [1, 0, -] ; keyword minmax: [0, -, 1]
    final = weighted_fusion_batch([[0.9, 0.5, NAN]], [[2.0, NAN, 6.0]], 0.3, 0.7, "minmax")[0]
    np.testing.assert_allclose(final, [0.3, 0.0, 0.7], rtol=1e-15)


def test_rrf_hand_example() -> None:
    final = rrf_fusion_batch([[1, 0, 3]], [[2, 1, NAN]], k=60)[0]
    np.testing.assert_allclose(final, [1 / 61 + 1 / 62, 1 / 61, 1 / 63], rtol=1e-15)
    weighted = rrf_fusion_batch([[1, 2]], [[2, 0]], k=10, vector_weight=2.0, keyword_weight=0.5)[0]
    np.testing.assert_allclose(weighted, [2 / 11 + 0.5 / 12, 2 / 12], rtol=1e-15)
    with pytest.raises(ValueError, match="1-based rank"):
        rrf_fusion_batch([[-1]], [[1]])


def test_fuse_rrf_uses_ranks_of_present_legs() -> None:
    rrf = Strategy(version="rrf", fusion="rrf", vector_weight=1.0, keyword_weight=1.0,
                   vector_candidate_k=100, keyword_candidate_k=100)
    final = fuse(rrf, [0.9, NAN], [1.2, 3.4], [1, 0], [2, 1])
    np.testing.assert_allclose(final, [1 / 61 + 1 / 62, 1 / 61], rtol=1e-15)
    with pytest.raises(ValueError, match="1-based rank"):
        fuse(rrf, [0.9], [NAN], [0], [0])
    with pytest.raises(ValueError, match="normalization must be 'none'"):
        fuse(SimpleNamespace(fusion="rrf", normalization="minmax", vector_weight=1,
                             keyword_weight=1, rrf_k=60), [0.9], [0.1], [1], [1])
    with pytest.raises(ValueError, match="unknown fusion"):
        fuse(SimpleNamespace(fusion="max", normalization="none"), [0.9], [0.1])


def test_tie_break_order() -> None:
    assert TIE_BREAK == "final_score desc, vector_score desc (missing last), chunk_id asc"
    final = [0.5, 0.9, 0.5, 0.5, 0.5]
    vector = [0.2, 0.1, NAN, 0.2, 0.4]
    ids = ["c", "z", "a", "b", "y"]
    assert [ids[i] for i in order(final, vector, ids)] == ["z", "y", "b", "c", "a"]
    with pytest.raises(ValueError, match="unique"):
        order([1.0, 1.0], [NAN, NAN], [7, 7])


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_order_is_invariant_to_input_order(normalization: str) -> None:
    rng = np.random.default_rng(7)
    n = 40
    vector = np.round(rng.uniform(0, 1, n), 1)  # coarse values -> many ties
    keyword = np.round(rng.uniform(0, 5, n), 0)
    vector[rng.random(n) < 0.3] = NAN
    keyword[~np.isnan(vector) & (rng.random(n) < 0.5)] = NAN
    ids = rng.permutation(1000)[:n]
    strategy = SimpleNamespace(fusion="weighted", normalization=normalization,
                               vector_weight=0.5, keyword_weight=0.5, rrf_k=60)

    def ranked_ids(perm: np.ndarray) -> list[int]:
        v, k, i = vector[perm], keyword[perm], ids[perm]
        final = fuse(strategy, v, k, _ranks(v[None], i[None])[0], _ranks(k[None], i[None])[0])
        return list(i[order(final, v, i)])

    expected = ranked_ids(np.arange(n))
    for _ in range(5):
        assert ranked_ids(rng.permutation(n)) == expected


def _ranks(scores: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Leg ranks per row (1-based, score desc then id asc), 0 where missing."""
    ranks = np.zeros(scores.shape)
    for row in range(scores.shape[0]):
        present = np.flatnonzero(~np.isnan(scores[row]))
        ranked = present[np.lexsort((ids[row, present], -scores[row, present]))]
        ranks[row, ranked] = np.arange(1, ranked.size + 1)
    return ranks


def _random_pools(seed: int, n_cases: int = 60, width: int = 25) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (n_cases, width)
    mask = rng.random(shape) < 0.8
    mask[0] = False  # an empty pool
    mask[1] = False
    mask[1, 3] = True  # a single-slot pool
    vector = np.round(rng.normal(0.5, 0.2, shape), 2)
    keyword = np.round(rng.exponential(1.0, shape), 1)
    vector[rng.random(shape) < 0.3] = NAN
    keyword[rng.random(shape) < 0.3] = NAN
    keyword[2] = NAN  # keyword leg disabled for one case
    vector[3] = 0.25  # all-equal vector scores
    ids = np.stack([rng.permutation(10 * width)[:width] for _ in range(n_cases)])
    vector_rank, keyword_rank = _ranks(vector, ids), _ranks(keyword, ids)
    # Garbage in masked slots must be ignored.
    vector[~mask], keyword[~mask], vector_rank[~mask] = 99.0, -7.0, -3.0
    return {"mask": mask, "vector": vector, "keyword": keyword, "vector_rank": vector_rank,
            "keyword_rank": keyword_rank, "ids": ids}


STRATEGY_LIKES = [
    SimpleNamespace(fusion="weighted", normalization=norm, vector_weight=wv,
                    keyword_weight=1 - wv, rrf_k=60)
    for norm, wv in itertools.product(NORMALIZATIONS, (0.3, 0.7, 1.0))
] + [SimpleNamespace(fusion="rrf", normalization="none", vector_weight=1.0,
                     keyword_weight=w, rrf_k=k) for w, k in ((1.0, 60), (0.5, 1), (2.0, 0))]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batch_equals_one_dimensional_exactly(seed: int) -> None:
    p = _random_pools(seed)
    for strategy in STRATEGY_LIKES:
        final = fuse_batch(strategy, p["vector"], p["keyword"], p["vector_rank"],
                           p["keyword_rank"], p["mask"])
        ordered = order_batch(final, p["vector"], p["ids"], p["mask"])
        assert np.all(final[~p["mask"]] == -np.inf)
        for row in range(final.shape[0]):
            slots = np.flatnonzero(p["mask"][row])
            v, k, ids = p["vector"][row, slots], p["keyword"][row, slots], p["ids"][row, slots]
            single = fuse(strategy, v, k, p["vector_rank"][row, slots],
                          p["keyword_rank"][row, slots])
            np.testing.assert_array_equal(final[row, slots], single, strict=True)
            expected = slots[order(single, v, ids)]
            np.testing.assert_array_equal(ordered[row, :slots.size], expected)
            assert set(ordered[row, slots.size:]) == set(np.flatnonzero(~p["mask"][row]))


def test_batch_normalize_and_rrf_match_one_dimensional() -> None:
    p = _random_pools(3)
    for method in NORMALIZATIONS:
        batch = normalize_batch(p["vector"], method, p["mask"], p["vector_rank"])
        for row in range(batch.shape[0]):
            slots = np.flatnonzero(p["mask"][row])
            single = normalize(p["vector"][row, slots], method, p["vector_rank"][row, slots])
            np.testing.assert_array_equal(batch[row, slots], single)
    vr, kr = p["vector_rank"], p["keyword_rank"]  # masked slots hold garbage ranks
    batch = rrf_fusion_batch(vr, kr, 60, 1.0, 1.0, p["mask"])
    for row in range(batch.shape[0]):
        slots = np.flatnonzero(p["mask"][row])
        np.testing.assert_array_equal(batch[row, slots], rrf_fusion_batch(vr[[row]][:, slots], kr[[row]][:, slots])[0])


def test_batch_shape_errors() -> None:
    with pytest.raises(ValueError, match="2-D"):
        normalize_batch([1.0, 2.0], "none")
    with pytest.raises(ValueError, match="mask shape"):
        normalize_batch([[1.0, 2.0]], "none", mask=[[True]])


def _one_pool(question, vector, keyword, strategy, limit, completed):
    """A pool fused alone with the 1-D functions: merge by chunk id (vector hits first), fuse, order."""
    hits = list(vector) + [h for h in keyword if h.chunk_id not in {v.chunk_id for v in vector}]
    ids = [h.chunk_id for h in hits]
    columns = {name: [None] * len(hits) for name in ("vs", "vr", "ks", "kr")}
    for leg, leg_hits in (("v", vector), ("k", keyword)):
        for rank, h in enumerate(leg_hits, start=1):
            columns[f"{leg}s"][ids.index(h.chunk_id)] = h.score
            columns[f"{leg}r"][ids.index(h.chunk_id)] = rank
    for leg, scores in (completed or {}).items():
        for chunk_id, score in scores.items():
            if chunk_id in ids and columns[f"{leg[0]}r"][ids.index(chunk_id)] is None:
                columns[f"{leg[0]}s"][ids.index(chunk_id)] = score
    arrays = {k: np.array(v, dtype=float) for k, v in columns.items()}
    final = fuse(strategy, arrays["vs"], arrays["ks"], arrays["vr"], arrays["kr"])
    ranked = order(final, arrays["vs"], np.array(ids)) if hits else []
    return [(ids[i], rank, columns["vs"][i], columns["vr"][i], columns["ks"][i], columns["kr"][i], float(final[i]))
            for rank, i in enumerate(ranked, start=1)], limit


@pytest.mark.parametrize("strategy", [
    Strategy(version="t-none"), Strategy(version="t-minmax", normalization="minmax"),
    Strategy(version="t-z", normalization="zscore"), Strategy(version="t-dbsf", normalization="dbsf"),
    Strategy(version="t-rank", normalization="rank"),
    Strategy(version="t-rrf", fusion="rrf", normalization="none")])
def test_a_batch_of_pools_is_fused_as_each_pool_alone(strategy) -> None:
    """``stages.fuse_pools`` fuses a batch at once, padded and masked: each pool's candidates, scores and order
    equal the pool fused alone (ties of both scores included, and completed leg scores where scores fuse)."""
    from rag_pipeline.retrieval.stages import fuse_pools
    from rag_pipeline.retrieval.trace import LegHit

    rng = np.random.default_rng(7)
    questions, vectors, keywords, limits, completed = [], [], [], [], []
    for q in range(9):
        ids = [f"{q:02d}-{n:03d}" for n in rng.permutation(60)]
        nv, nk = int(rng.integers(0, 25)), int(rng.integers(0, 25))
        v = sorted(rng.choice([0.5, 0.25, 0.75], nv) if q % 3 == 0 else rng.random(nv), reverse=True)
        k = sorted(rng.choice([2.0, 1.0], nk) if q % 4 == 0 else 10 * rng.random(nk), reverse=True)
        vectors.append([LegHit(i, "d", "n", float(s)) for i, s in zip(ids[:nv], v, strict=True)])
        keywords.append([LegHit(i, "d", "n", float(s)) for i, s in zip(ids[nv // 2:nv // 2 + nk], k, strict=True)])
        completed.append({"vector": dict.fromkeys(ids[nv:nv // 2 + nk], 0.1), "keyword": dict.fromkeys(ids[:nv], 0.0)})
        questions.append(f"q{q}")
        limits.append(int(rng.integers(1, 10)))
    if strategy.fusion == "rrf" or strategy.normalization == "rank":  # ranks only: no completed pools
        completed = [{} for _ in questions]
    traces = fuse_pools(questions, vectors, keywords, strategy, limits, completed)
    assert len({len(t.candidates) for t in traces}) > 3  # pools of many sizes: the batch is padded
    for trace, args in zip(traces, zip(questions, vectors, keywords, [strategy] * 9, limits, completed), strict=True):
        expected, limit = _one_pool(*args)
        got = [(c.chunk_id, c.rank, c.vector_score, c.vector_rank, c.keyword_score, c.keyword_rank, c.final_score)
               for c in trace.candidates]
        assert got == expected
        assert trace.selected == trace.candidates[:limit]
        assert all(c.strategy_version == strategy.version for c in trace.candidates)
