"""Miss reasons know the rerank stage: a relevant chunk within k after the first stage but below k after the
rerank stage is ``below_cutoff_after_rerank``, with both ranks; a chunk the stage lifted into k says so."""

from __future__ import annotations

from rag_pipeline.evaluation.diagnosis.miss_reasons import classify_misses, first_line, summarize
from rag_pipeline.retrieval.trace import Candidate


def _candidate(chunk: str, rank: int, first: int, final: float, rerank: float) -> Candidate:
    return Candidate(chunk, "d", "doc", rank, 0.5, first, 1.0, first, rerank, final, "t-rerank",
                     first_stage_rank=first, first_stage_score=1.0 / first)


POOL = [_candidate("c", 1, 3, 0.9, 0.8), _candidate("a", 2, 1, 0.7, 0.1), _candidate("b", 3, 2, 0.4, 0.0)]


def test_pushed_out_by_the_rerank_stage() -> None:
    case = {"case_id": "q1", "relevant_chunk_ids": ["b", "c"], "k": 2}
    reasons = {m.chunk_id: m for m in classify_misses(case, POOL, legs=("vector", "keyword"))}
    pushed = reasons["b"]
    assert (pushed.reason, pushed.rank, pushed.first_stage_rank, pushed.rerank_score) == \
        ("below_cutoff_after_rerank", 3, 2, 0.0)
    assert pushed.gap == 0.7 - 0.4
    assert "rank 2 <= k=2 after the first stage, rank 3 after the rerank stage" in pushed.detail
    assert pushed.model_dump()["first_stage_rank"] == 2
    lifted = reasons["c"]
    assert lifted.reason == "hit" and "first-stage rank 3: the rerank stage lifted it" in lifted.detail
    assert summarize(reasons.values()).dominant_reason == "below_cutoff_after_rerank"


def test_below_k_in_both_stages_keeps_the_first_stage_reason() -> None:
    case = {"case_id": "q1", "relevant_chunk_ids": ["b"], "k": 1}
    (m,) = classify_misses(case, POOL, legs=("vector", "keyword"))
    assert m.reason == "below_cutoff" and m.first_stage_rank == 2
    summary = summarize([m])
    assert first_line(summary, {"ndcg_at_k": 0.0}).startswith("All metrics are 0: 1 of 1 relevant chunks are in")
