"""What a TREC run file import stored and counted, and what an export wrote."""

from __future__ import annotations

from pydantic import BaseModel, Field


class TrecRunImport(BaseModel):
    """One imported run file: the stored run and what the file held against the dataset."""

    run_id: str
    strategy_version: str
    dataset: str
    dataset_version: str
    knowledge_base: str
    lines: int = Field(description="Lines of the file (blank lines not counted).")
    lines_stored: int = Field(description="Lines whose topic is a case of the dataset: the stored candidates.")
    cases: int
    cases_without_lines: int = Field(description="Cases of the dataset with no line in the file: stored as empty "
                                                 "rankings (every metric 0), as trec_eval -c counts them.")
    unknown_topics: int = Field(description="Topics of the file that are no case of the dataset (not stored).")
    unknown_topic_lines: int
    unknown_topic_examples: list[str]
    external_ids: bool = Field(description="Some docno is not a canonical UUID: stored under a derived chunk UUID "
                                           "with the original kept for exports.")
    metrics: dict[str, float]
    timings: dict[str, float] = Field(description="Seconds: reading the file and copying it into PostgreSQL, the "
                                                  "checks, ranking and storing the pools, metrics and case results, "
                                                  "total (also the run's `timings`).")


class TrecExport(BaseModel):
    """Files an export wrote, and how many lines each."""

    files: dict[str, int]
    tied_scores: int = Field(0, description="Candidates tied in score with the one ranked above them that "
                                            "trec_eval, ordering ties by docno descending, would put first.")
