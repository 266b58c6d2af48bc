"""Evaluation runs: a run's summary (what it measured, its mean metrics, counts and timings), a page of the run
history, and the runs an evaluation request queued and launched."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rag_pipeline.contracts.answers import PrunedAnswerRun
from rag_pipeline.contracts.attached import AttachedContent
from rag_pipeline.contracts.label_check import LabelStatus
from rag_pipeline.contracts.metrics import InlineMetrics, JudgedSummary, Metrics

RunStatus = Literal["queued", "running", "succeeded", "failed", "abandoned"]


class Strict(BaseModel):
    """A shape with exactly its fields (no others accepted)."""

    model_config = ConfigDict(extra="forbid")


class DatasetRef(Strict):
    id: str
    name: str
    version: str = Field(description="SHA-256 of the canonical cases (the dataset version).")
    source_path: str | None
    case_count: int


class KnowledgeBaseRef(Strict):
    id: str
    name: str
    version: str | None = Field(description="Content version of the knowledge base the run measured (null: a "
                                            "run older than that record).")


class MissReasonCounts(BaseModel):
    """A run's relevant chunks per miss reason (docs/design.md §4.3) and the most frequent reason other than hit."""

    labels: int
    counts: dict[str, int]
    dominant_reason: str | None
    dominant_count: int
    invalid_labels: int


class LabelIntegrity(BaseModel):
    """A run's label check (docs/design.md §8): labels per status and the first invalid ones with their fix."""

    counts: dict[str, int]
    summary: str
    cases_all_invalid: list[str]
    cases_some_invalid: list[str]
    examples: list[LabelStatus]


class RetrieverCounts(BaseModel):
    """An ``http`` strategy's run: how its retriever answered (latencies in milliseconds, per case, the last
    attempt's; percentiles by linear interpolation; null: no case was answered)."""

    cases_asked: int = Field(description="Cases asked by this evaluation (the others were answered before it was "
                                         "resumed).")
    cases_resumed: int = Field(description="Cases answered by an earlier, interrupted evaluation.")
    failed_cases: int = Field(description="Cases the retriever gave no ranking for (stored with their error and an "
                                          "empty pool: every metric 0).")
    failure_examples: list[str] = Field(default_factory=list, description="The first failed cases: `case: why`.")
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    latency_max_ms: float | None = None


class RunCounts(BaseModel):
    """What a succeeded run counted (its summary's ``counts``): cases, relevant chunks, miss reasons, labels."""

    batch_size: int | None = None
    readers: int | None = None
    cases_with_hit: int = 0
    cases_without_candidates: int = 0
    relevant_in_pool: int = 0
    relevant_total: int = 0
    unanswerable_cases: int = 0
    relevant_ids_not_in_kb: int = 0
    miss_reasons: MissReasonCounts | None = None
    first_line: str | None = Field(None, description="Why every metric is 0 (null: they are not all 0).")
    label_integrity: LabelIntegrity | None = None
    question_embeddings: dict[str, int] | None = None
    retriever: RetrieverCounts | None = None
    judged: JudgedSummary | None = Field(None, description="Judged@k and the pool's judged share (docs/metrics.md); "
                                                           "null: a run stored before they were recorded.")
    rescored_from: str | None = Field(None, description="The run whose stored pools this run re-scored on new "
                                                        "labels, without retrieving (`runs rescore`).")
    attached: AttachedContent | None = Field(None, description="An attached knowledge base: the rows and content "
                                                               "fingerprint its table had during the run.")


STAGE_LABELS = {
    "prepare_s": "prepare", "index_load_s": "index load", "question_embedding_s": "question embedding",
    "vector_leg_s": "vector leg", "keyword_leg_s": "keyword leg", "pool_completion_s": "pool completion",
    "fusion_s": "fusion", "rerank_s": "rerank", "diagnosis_s": "diagnosis", "metrics_s": "metrics",
    "candidate_write_s": "candidate write", "summary_write_s": "summary write", "other_s": "other"}
"""Each stage field of :class:`StageTimes` (in the run's order) and its name where people read it."""


class StageTimes(Strict):
    """Where a run's wall time went, per stage (seconds, docs/evaluating.md, "Time per stage"): the stages plus
    ``other`` add up to ``wall_s``. Stages on the reader threads (legs, completion, fusion, rerank, diagnosis) share the
    time the main thread waited for those threads, in proportion to their seconds on the threads."""

    prepare_s: float = Field(ge=0, description="Sweeps, dataset and label checks, the strategy's preflight (its "
                                               "embedding model loaded), the run row.")
    index_load_s: float = Field(ge=0, description="The wait for the reader snapshot's KB version and the "
                                                  "in-memory BM25 postings and vectors (0 when shared from an "
                                                  "earlier run); the first batches' HNSW walks run meanwhile.")
    question_embedding_s: float = Field(ge=0, description="Question vectors: read from `question_embeddings` or "
                                                          "embedded.")
    vector_leg_s: float = Field(ge=0)
    keyword_leg_s: float = Field(ge=0)
    pool_completion_s: float = Field(ge=0, description="`complete_pool`: the other leg's scores of each pool chunk.")
    fusion_s: float = Field(ge=0)
    rerank_s: float = Field(ge=0)
    diagnosis_s: float = Field(ge=0, description="The label check and the miss reasons of every relevant chunk.")
    metrics_s: float = Field(ge=0)
    candidate_write_s: float = Field(ge=0, description="COPY of the candidate pools and the case results.")
    summary_write_s: float = Field(ge=0, description="The judged shares and the run's summary (the commit after "
                                                     "it is not counted).")
    other_s: float = Field(ge=0, description="What no stage covers (heartbeats, progress, thread hand-offs).")
    wall_s: float = Field(ge=0, description="The run's wall time, from its start to its summary's write.")

    def stages(self) -> list[tuple[str, float]]:
        """``(label, seconds)`` of every stage, ``other`` last."""
        return [(label, getattr(self, key)) for key, label in STAGE_LABELS.items()]


class RunSummary(Strict, InlineMetrics):
    """A run's summary (the report's ``summary``; what ``rag-pipeline show`` prints first); one mean per metric,
    null until the run succeeds."""

    run_id: str
    status: RunStatus = Field(description="queued → running → succeeded | failed | abandoned (no heartbeat).")
    is_current: bool = Field(description="The run `compare` uses for its dataset × knowledge base × strategy.")
    strategy_version: str
    params_hash: str
    strategy_params: dict[str, Any]
    embedding_model: str | None
    dataset: DatasetRef
    knowledge_base: KnowledgeBaseRef
    metrics: Metrics | None  # written as the seven metric keys in this place (InlineMetrics)
    case_count: int
    candidate_count: int
    counts: RunCounts | None
    timings: dict[str, float] | None = Field(description="Seconds: `*_wall_s` / `total_s` are wall time, "
                                                       "`*_sql_s` are summed over the reader threads.")
    question_embeddings: dict[str, int] | None = Field(description="Question vectors reused from earlier runs "
                                                                   "vs embedded by this one (null: no vector leg).")
    stages: StageTimes | None = Field(None, description="The run's wall time per stage (null: a run not searched "
                                                        "by the pipeline's own legs, or stored before stages were "
                                                        "recorded).")
    partition_key: str | None
    dagster_run_id: str | None
    worker: str | None = Field(None, description="The process that executed the run: a Celery worker's node name "
                                                 "(`NAME@host`, deploy/celery/README.md), else the host under the "
                                                 "default launcher; null for runs made outside Dagster.")
    error: str | None
    started_at: str
    finished_at: str | None
    queued_at: str | None
    cases_done: int = Field(description="Cases evaluated so far (updated after a batch, at most every 0.5 s; the "
                                        "finished run: all); total: `dataset.case_count`.")


class RunLinks(BaseModel):
    self: str = Field(description="This run's detail (summary + cases).")
    knowledge_base_runs: str = Field(description="The run history of its knowledge base.")


class RunItem(RunSummary):
    links: RunLinks


class QueueInfo(BaseModel):
    daemon_running: bool = Field(description="A Dagster daemon is picking up queued runs.")
    message: str | None = Field(None, description="Why queued runs wait, and how to start a daemon.")


class RunPage(BaseModel):
    """One page of a knowledge base's run history, newest first."""

    total: int = Field(description="Runs matching the filters.")
    limit: int
    offset: int
    runs: list[RunItem]
    queue: QueueInfo


class QueuedRun(BaseModel):
    """One queued evaluation run: its id, strategy, Dagster partition key and its click's queue id."""

    run_id: str
    strategy_version: str
    dataset: str
    dataset_id: str
    partition_key: str
    dagster_run_id: str
    status: RunStatus = "queued"


class QueuedEvaluation(BaseModel):
    """The runs one evaluation request queued (one per strategy)."""

    runs: list[QueuedRun]
    label_warning: str | None = Field(description="One line when some labels are not searchable chunks (the runs "
                                                  "go ahead, as in the CLI).")


class HistoryPoint(BaseModel):
    """One succeeded run of a dataset: when it finished, on which dataset version, its mean metrics."""

    run_id: str
    strategy_version: str
    dataset_version: str
    is_current: bool
    finished_at: dt.datetime
    case_count: int
    metrics: dict[str, float]


class FinishedRun(BaseModel):
    """One succeeded run made outside Dagster, with what its materialization shows."""

    run_id: str
    dataset: str
    dataset_version: str
    knowledge_base: str
    strategy_version: str
    params_hash: str
    case_count: int
    candidate_count: int
    finished_at: str
    averages: dict[str, float]
    knowledge_base_version: str | None

    @property
    def cursor(self) -> str:
        return f"{self.finished_at}|{self.run_id}"


class LaunchedRun(BaseModel):
    run_id: str
    status: RunStatus
    strategy_version: str
    partition_key: str = Field(description="The Dagster partition `<dataset>|<strategy>`.")
    dagster_run_id: str = Field(description="The click's queue id (the `rag/queue_id` tag of the Dagster run that "
                                            "carries it out: one per click, one per strategy on Celery workers); "
                                            "that run's own id once it is requested.")
    links: RunLinks


class EvaluateResponse(BaseModel):
    """202: one queued run per strategy; poll ``links.self`` until ``status`` is succeeded/failed/abandoned."""

    dataset: str
    dataset_id: str
    dataset_version: str
    knowledge_base: str
    runs: list[LaunchedRun]
    label_warning: str | None = Field(None, description="Some labels are not searchable chunks (docs/design.md §8): "
                                                        "counts, the dominant cause and an example with its fix.")
    queue: QueueInfo


class PrunedRun(BaseModel):
    run_id: str
    dataset: str
    knowledge_base: str
    strategy_version: str
    status: str
    started_at: dt.datetime
    candidate_rows: int
    bytes: int


class PruneResult(BaseModel):
    """What a prune removed (or, with ``dry_run``, would remove)."""

    dry_run: bool
    runs: list[PrunedRun] = Field(default_factory=list)
    kept_for_comparison: int = 0  # runs kept only because a stored comparison refers to them
    answer_runs: list[PrunedAnswerRun] = Field(default_factory=list, description="answer runs removed by the same "
                                                                                 "rule (docs/design.md §12.6)")

    @property
    def candidate_rows(self) -> int:
        return sum(r.candidate_rows for r in self.runs)

    @property
    def bytes_freed(self) -> int:
        return sum(r.bytes for r in self.runs) + sum(r.bytes for r in self.answer_runs)


class RescoredRun(BaseModel):
    """``rag-pipeline runs rescore``: the new run (the stored pools scored on the new labels) and the run it
    re-scored; ``cases_left_out``: cases of that run the new dataset version no longer has."""

    run: RunSummary
    rescored_from: RunSummary
    cases_left_out: list[str]
