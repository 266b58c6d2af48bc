"""Keep the cyclic garbage collector off what a run found in memory, and rarer while the run allocates.

A run builds hundreds of thousands of small tuples (leg hits, candidates, rows). By default every 700 allocations
start a collection, and every so often a full one walks every tracked object of the process: the leg indexes'
chunk-id arrays, the lexeme table, the loaded modules. :func:`frozen` moves the objects alive at its start to the
collector's permanent generation (:func:`gc.freeze`) and raises the first generation's threshold to
:data:`ALLOCATIONS`; at its end both go back (:func:`gc.unfreeze`, the former thresholds). Reference counting frees
everything as before; only garbage in reference cycles waits longer. Blocks nest (the outermost one restores);
100,000 chunks × 1,000 cases, ``hybrid-bm25-exact-v1``: about 10 % of the run (bench/RESULTS.md)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

ALLOCATIONS = 20_000
"""The first generation's threshold inside a block (CPython's default is 700)."""

class _Pause:
    """The process's blocks: how deep they nest, and the thresholds the outermost one found."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.thresholds = gc.get_threshold()


_pause = _Pause()


@contextmanager
def frozen() -> Iterator[None]:
    """While the block runs, the collector leaves out the objects alive at its start and runs less often."""
    with _pause.lock:
        if _pause.depth == 0:
            _pause.thresholds = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(max(ALLOCATIONS, _pause.thresholds[0]), *_pause.thresholds[1:])
        _pause.depth += 1
    try:
        yield
    finally:
        with _pause.lock:
            _pause.depth -= 1
            if _pause.depth == 0:
                gc.unfreeze()
                gc.set_threshold(*_pause.thresholds)
