"""Seconds per named stage, measured with ``time.perf_counter`` around the real work (the run's stage times,
docs/evaluating.md, "Time per stage"). One clock per thread, or shared: adding is locked."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class StageClock:
    """Sums of seconds by stage name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def add(self, stage: str, seconds: float) -> None:
        with self._lock:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the ``with`` block as ``name`` (also when it raises)."""
        t = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t)

    def merge(self, other: StageClock) -> None:
        for name, seconds in other.seconds.items():
            self.add(name, seconds)

    def total(self) -> float:
        with self._lock:
            return sum(self.seconds.values())

    def get(self, stage: str) -> float:
        return self.seconds.get(stage, 0.0)


@contextmanager
def timed(clock: StageClock | None, name: str) -> Iterator[None]:
    """:meth:`StageClock.stage` of ``clock``; nothing without one."""
    if clock is None:
        yield
    else:
        with clock.stage(name):
            yield
