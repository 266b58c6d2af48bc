"""A run's judged shares are counted while its pools are written (``judged.judged_of_traces``): the same summary
as the one read back from the stored rows (``judged.judged_of_run``), with graded labels (grade 0 included),
unjudged pool chunks and an unanswerable case."""

from __future__ import annotations

from rag_pipeline.evaluation.datasets.load import load_dataset
from rag_pipeline.evaluation.evaluate import evaluate_dataset
from rag_pipeline.evaluation.runs.judged import judged_of_run
from rag_pipeline.retrieval.strategies import get_strategy
from rag_pipeline_tests.eval_helpers import ingest_tiny_kb, tiny_cases, write_dataset

KB = "judged-counts"


def test_the_judged_shares_counted_while_writing_equal_those_read_back(engine, tmp_path):
    chunks = ingest_tiny_kb(engine, KB, tmp_path / "docs")
    cases = tiny_cases(chunks) + [
        {"case_id": "graded-001", "question": "basebackup archiving and coffee", "k": 4,
         "relevant_chunk_ids": {chunks["backup.md"]: 2, chunks["coffee.md"]: 0, chunks["monorepo.md"]: 0}},
        {"case_id": "nothing-001", "question": "What is the CEO's private phone number?", "k": 3,
         "relevant_chunk_ids": [], "answerable": False}]
    dataset = load_dataset(write_dataset(tmp_path / "d.json", KB, cases, name="judged-counts"))
    for version in ("hybrid-v1", "keyword-v1", "vector-v1"):
        outcome = evaluate_dataset(engine, dataset, get_strategy(version), batch_size=3)
        with engine.connect() as conn:
            stored = judged_of_run(conn, outcome.run_id)
        assert outcome.summary.judged == stored, version
        assert stored.cases + stored.undefined == len(cases) - 1  # the answerable ones
        assert stored.pool is not None and 0 < stored.pool < 1, version  # judged and unjudged chunks in the pools
