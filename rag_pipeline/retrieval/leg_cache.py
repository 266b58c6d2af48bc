"""The hits of the HNSW vector leg, remembered for the other strategies of a click.

Several strategies of a click run the same vector leg: hybrid-v1 and vector-v1 both ask the USE index for the top
10 of each question at ``ef_search`` 100, hybrid-bm25-v1 and rrf-v1 for the top 100. That leg is an SQL statement
on the HNSW index; the second strategy takes the first one's hits instead of asking again. A leg's hits are a
function of what they are remembered by: the knowledge base and its content version as the run's snapshot sees
it (the same searchable chunks and vectors), the model, the strategy's ``ef_search`` and candidate k, and the
question's vector (its bytes); the index scan of the same graph with the same settings returns the same rows.
At most :data:`BUDGET_HITS` hits stay, the least recently used go first."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence

import numpy as np

from rag_pipeline.retrieval.trace import LegHit

BUDGET_HITS = 2_000_000
"""Hits kept across the runs of one process (about 150 bytes each)."""


class LegCache:
    """Remembered legs of one knowledge base content version (``scope``), shared by the runs of a process."""

    def __init__(self, scope: Hashable, budget: int = BUDGET_HITS):
        self.scope = scope
        self.budget = budget
        self._kept: OrderedDict[Hashable, list[LegHit]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.asked = self.reused = 0

    @staticmethod
    def keys(setting: Hashable, vectors: np.ndarray) -> list[Hashable]:
        """One key per question: the leg's settings and a digest of the question vector's bytes."""
        rows = np.ascontiguousarray(vectors, dtype=np.float32)
        return [(setting, hashlib.blake2b(row.tobytes(), digest_size=16).digest()) for row in rows]

    def take(self, keys: Sequence[Hashable]) -> list[list[LegHit] | None]:
        with self._lock:
            found = []
            for key in keys:
                hits = self._kept.get(key)
                if hits is not None:
                    self._kept.move_to_end(key)
                found.append(hits)
            self.asked += len(keys)
            self.reused += sum(h is not None for h in found)
            return found

    def keep(self, keys: Sequence[Hashable], legs: Sequence[list[LegHit]]) -> None:
        with self._lock:
            for key, hits in zip(keys, legs, strict=True):
                if key in self._kept or len(hits) > self.budget:
                    continue
                self._kept[key] = hits
                self._size += len(hits)
            while self._size > self.budget:
                _, dropped = self._kept.popitem(last=False)
                self._size -= len(dropped)
