"""A run's wall time per stage (:class:`~rag_pipeline.contracts.runs.StageTimes`, docs/evaluating.md, "Time per
stage") from the main thread's :class:`StageClock` and the reader threads' one."""

from __future__ import annotations

from rag_pipeline.contracts.runs import StageTimes
from rag_pipeline.retrieval.stage_clock import StageClock

READER_STAGES = ("vector_leg", "keyword_leg", "pool_completion", "fusion", "rerank", "diagnosis")
"""The stages run on the reader threads."""


def share_readers(clock: StageClock, on_readers: StageClock, waited: float, busy: float) -> None:
    """Add the reader threads' stages to ``clock`` as wall time: the main thread's ``waited`` seconds, split by
    each stage's share of the readers' ``busy`` seconds (the unstaged rest of those is left to ``other``)."""
    factor = min(1.0, waited / busy) if busy > 0 else 0.0
    for stage in READER_STAGES:
        clock.add(stage, on_readers.get(stage) * factor)


def stage_times_of(clock: StageClock, wall: float) -> StageTimes:
    """:class:`StageTimes` of ``clock`` (stage name = field name without ``_s``) and the run's ``wall`` time, in
    whole microseconds, the stages rounded down: they and ``other`` add up to ``wall``."""
    keys = [f for f in StageTimes.model_fields if f not in ("other_s", "wall_s")]
    micros = {k: int(clock.get(k[:-2]) * 1e6) for k in keys}
    wall_us = max(int(round(wall * 1e6)), sum(micros.values()))
    return StageTimes(**{k: v / 1e6 for k, v in micros.items()}, other_s=(wall_us - sum(micros.values())) / 1e6,
                      wall_s=wall_us / 1e6)
