"""What a retrieval returns: one question's candidate pool with every leg's score and rank (docs/design.md §4.1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from rag_pipeline.contracts.errors import BadInputError


class RetrievalError(BadInputError, RuntimeError):
    """The knowledge base cannot be searched with this strategy; the message tells the user what to do."""


class Candidate(NamedTuple):
    """One chunk of the merged pool, with every score that explains its place (docs/design.md §4.1). A named tuple,
    like :class:`LegHit`: a click builds hundreds of thousands, and a tuple is built several times faster than a
    frozen dataclass (``_replace`` makes a changed copy)."""

    chunk_id: str
    document_id: str
    document_name: str
    rank: int  # 1-based final rank in the pool
    vector_score: float | None
    vector_rank: int | None
    keyword_score: float | None
    keyword_rank: int | None
    rerank_score: float | None  # the rerank stage's score (None: no rerank stage, or below its top_n)
    final_score: float
    strategy_version: str
    first_stage_rank: int | None = None  # with a rerank stage: the rank before it (``rank`` is the rank after)
    first_stage_score: float | None = None  # with a rerank stage: the fused score of the legs


@dataclass(frozen=True)
class RetrievalTrace:
    """The whole sorted pool (for evaluation) and its first ``limit`` candidates (for the business path)."""

    question: str
    candidates: list[Candidate]
    selected: list[Candidate]
    # Only with ``targets`` (evaluation): target chunk id -> {"keyword_score", "keyword_rank"} for targets the
    # keyword leg scored *below* its top k (None/None: the chunk shares no term with the question).
    keyword_targets: dict[str, dict] = field(default_factory=dict, compare=False)


class LegHit(NamedTuple):
    """One row of one leg (raw score); a leg's hits are best first. A named tuple: a click makes hundreds of
    thousands of them, and a tuple is built several times faster than a frozen dataclass."""

    chunk_id: str
    document_id: str
    document_name: str
    score: float
