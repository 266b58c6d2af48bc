"""The deterministic cut of the vector leg: the top k by (score desc, chunk id asc), whatever the query plan.

:func:`top_k` fetches a few rows more than k from the HNSW index and fetches again with twice the limit while rows
tied with the k-th fill the fetch (docs/design.md §3.3); a question the index scan under-served is searched again
exactly."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rag_pipeline.retrieval.trace import LegHit

FETCH_MARGIN = 8
"""Rows fetched beyond k, at least (k // 4 for a larger k): ties at the boundary rarely need a second query."""

Search = Callable[[Sequence[int], int, bool], list[list[LegHit]]]
"""``search(question indexes, limit, exact)`` → per question, its rows sorted by :func:`leg_order`."""


def fetch_size(k: int) -> int:
    return k + max(FETCH_MARGIN, k // 4)


def leg_order(hit: LegHit) -> tuple[float, str]:
    """The rule of every leg: score desc, then chunk id asc."""
    return -hit.score, hit.chunk_id


def tie_may_continue(leg: list[LegHit], k: int, limit: int) -> bool:
    """All ``limit`` rows came back and the last one still scores as high as the k-th: more may tie."""
    return 0 < k < len(leg) and len(leg) >= limit and leg[-1].score >= leg[k - 1].score


def top_k(search: Search, n: int, k: int, available: Callable[[], int], exact: bool = False) -> list[list[LegHit]]:
    """Per question of ``n``, its top ``k`` by :func:`leg_order`; ``available()`` = searchable vectors of the
    model in the knowledge base (asked at most once, only when an index scan came back short); ``exact``: every
    search exact from the start (a strategy's ``vector_search: exact``)."""
    hits: list[list[LegHit]] = [[] for _ in range(n)]
    if k <= 0:
        return hits
    known: list[int] = []

    def total() -> int:
        if not known:
            known.append(int(available()))
        return known[0]

    state = {i: (fetch_size(k), exact) for i in range(n)}
    while state:
        groups: dict[tuple[int, bool], list[int]] = {}
        for i, key in state.items():
            groups.setdefault(key, []).append(i)
        state = {}
        for (limit, exact), indexes in sorted(groups.items()):
            for i, leg in zip(indexes, search(indexes, limit, exact), strict=True):
                leg = sorted(leg, key=leg_order)
                if not exact and len(leg) < limit and len(leg) < total():
                    state[i] = (limit, True)  # the index scan gave up early: exact search
                elif tie_may_continue(leg, k, limit):
                    state[i] = (2 * limit, exact)
                else:
                    hits[i] = leg[:k]
    return hits
