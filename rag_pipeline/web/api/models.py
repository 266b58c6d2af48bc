"""Pydantic models of the API's JSON: the report shapes of :data:`rag_pipeline.evaluation.report_schema.REPORT_SCHEMA`
(seed §6.3) and the API's own envelopes (pages, launched runs, uploads, knowledge bases, datasets)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

RunStatus = Literal["queued", "running", "succeeded", "failed", "abandoned"]
CandidateMode = Literal["default", "all", "selected", "relevant", "none"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Metrics(_Strict):
    """Per-case metrics at the case's own k (trec_eval conventions)."""

    precision_at_k: float
    recall_at_k: float
    reciprocal_rank: float
    ndcg_at_k: float
    hit_at_k: float
    average_precision_at_k: float
    r_precision: float


class Candidate(_Strict):
    """One candidate of a case's pool (seed §4.1): every leg's score and rank, relevance and selection."""

    chunk_id: str
    document_id: str
    document_name: str
    rank: int = Field(ge=1, description="Rank in the fused pool.")
    vector_score: float | None
    vector_rank: int | None
    keyword_score: float | None
    keyword_rank: int | None
    rerank_score: float | None = Field(description="The rerank stage's score (null: no rerank stage, or below "
                                                   "its `top_n`).")
    first_stage_rank: int | None = Field(description="Rank before the rerank stage (null without one).")
    vector_completed: bool = Field(description="The vector score was filled in for a chunk outside the vector "
                                               "leg's top-N (`complete_pool`).")
    keyword_completed: bool = Field(description="The keyword score was filled in for a chunk outside the keyword "
                                                "leg's top-N (`complete_pool`).")
    final_score: float
    is_relevant: bool
    relevance_grade: int | None = Field(description="The case's grade of this chunk; null = not judged.")
    is_selected: bool = Field(description="In the top k the case was scored on.")
    strategy_version: str
    content: str | None = Field(None, description="The chunk text, only with `include_text=true` (looked up "
                                                  "live; null when the chunk no longer exists).")


class CaseReport(_Strict):
    """One case of a run (seed §6.3): ids, grades, metrics, miss reasons and candidates."""

    case_id: str
    case_index: int
    question: str
    k: int
    retrieved_chunk_ids: list[str]
    relevant_chunk_ids: list[str]
    relevance_grades: dict[str, int]
    first_relevant_rank: int | None
    metrics: Metrics
    miss_reasons: Any = Field(description="Why each relevant chunk was missed (`hit`, `below_cutoff`, ...).")
    candidates: list[Candidate]


class DatasetRef(_Strict):
    id: str
    name: str
    version: str = Field(description="SHA-256 of the canonical cases (the dataset version).")
    source_path: str | None
    case_count: int


class KnowledgeBaseRef(_Strict):
    id: str
    name: str
    version: str | None = Field(description="Content version of the knowledge base the run measured (null: a "
                                            "run older than that record).")


class RunSummary(_Strict):
    """A run's summary (the report's ``summary``; what ``rag-pipeline show`` prints first)."""

    run_id: str
    status: RunStatus = Field(description="queued → running → succeeded | failed | abandoned (no heartbeat).")
    is_current: bool = Field(description="The run `compare` uses for its dataset × knowledge base × strategy.")
    strategy_version: str
    params_hash: str
    strategy_params: dict[str, Any]
    embedding_model: str | None
    dataset: DatasetRef
    knowledge_base: KnowledgeBaseRef
    precision_at_k: float | None
    recall_at_k: float | None
    reciprocal_rank: float | None
    ndcg_at_k: float | None
    hit_at_k: float | None
    average_precision_at_k: float | None
    r_precision: float | None
    case_count: int
    candidate_count: int
    counts: dict[str, Any] | None
    timings: dict[str, float] | None = Field(description="Seconds: `*_wall_s` / `total_s` are wall time, "
                                                       "`*_sql_s` are summed over the reader threads.")
    question_embeddings: dict[str, Any] | None = Field(description="Question vectors reused from earlier runs "
                                                                   "vs embedded by this one (null: no vector leg).")
    partition_key: str | None
    dagster_run_id: str | None
    error: str | None
    started_at: str
    finished_at: str | None
    queued_at: str | None
    cases_done: int = Field(description="Cases evaluated so far (updated per batch); total: `dataset.case_count`.")


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


class CasePage(BaseModel):
    offset: int
    limit: int
    returned: int = Field(description="Cases in this response.")
    total_cases: int = Field(description="Cases of the run (its dataset version's case count).")
    candidates: CandidateMode
    include_text: bool


class EvaluationDetail(BaseModel):
    """Seed §6.3: the run summary and a page of its cases with candidates (``report_version`` as in the CLI)."""

    report_version: int
    summary: RunSummary
    cases: list[CaseReport]
    page: CasePage
    links: RunLinks
    queue: QueueInfo | None = Field(None, description="Set while the run is queued.")


class LaunchedRunModel(BaseModel):
    run_id: str
    status: RunStatus
    strategy_version: str
    partition_key: str = Field(description="The Dagster partition `<dataset>|<strategy>`.")
    dagster_run_id: str = Field(description="The id of the Dagster run that carries it out.")
    links: RunLinks


class EvaluateResponse(BaseModel):
    """202: one queued run per strategy; poll ``links.self`` until ``status`` is succeeded/failed/abandoned."""

    dataset: str
    dataset_id: str
    dataset_version: str
    knowledge_base: str
    runs: list[LaunchedRunModel]
    label_warning: str | None = Field(None, description="Some labels are not searchable chunks (seed §8): "
                                                        "counts, the dominant cause and an example with its fix.")
    queue: QueueInfo


class EvaluateRequest(BaseModel):
    """What to evaluate: a stored dataset (by name) or inline cases, and the strategies."""

    model_config = ConfigDict(extra="forbid")
    dataset: str | None = Field(None, max_length=200, description="Name of a dataset stored for this knowledge "
                                                                  "base (uploaded or evaluated before).")
    dataset_version: str | None = Field(None, max_length=64, description="With `dataset`: a version hash or a "
                                                                         "prefix of one (default: the latest).")
    cases: list[Any] | None = Field(None, description="Inline cases in the file format (seed §2), validated like "
                                                      "a file; stored as a version of dataset `name`.")
    name: str | None = Field(None, max_length=200, description="With `cases`: the dataset's name.")
    strategy_versions: list[str] | None = Field(None, max_length=100, description="Default: every strategy the "
                                                "knowledge base can run (it has the strategy's embedding model).")
    strict: bool = Field(False, description="Refuse when any label is not a searchable chunk (like --strict).")


class UploadResult(BaseModel):
    """A stored dataset version (``created``: false when the same cases were stored before)."""

    dataset_id: str
    name: str
    version: str
    knowledge_base: str
    case_count: int
    relevant_ids: int
    relevant_ids_not_in_kb: int = Field(description="Relevant ids that are not chunks of the knowledge base.")
    k_min: int
    k_max: int
    created: bool


class DatasetInfo(BaseModel):
    name: str
    knowledge_base: str
    dataset_id: str = Field(description="The latest version's id.")
    version: str = Field(description="The latest version's hash.")
    case_count: int
    source_path: str | None
    versions: int
    runs: int
    created_at: str | None
    last_seen_at: str | None
    last_run_at: str | None


class DatasetList(BaseModel):
    knowledge_base: str
    datasets: list[DatasetInfo]


class KnowledgeBaseInfo(BaseModel):
    id: str
    name: str
    text_search: str = Field(description="Keyword text mode: simple, english or chinese.")
    chunk_size: int
    chunk_overlap: int
    documents: int
    searchable_documents: int
    current_chunks: int
    replaced_chunks: int
    embeddings: dict[str, int] = Field(description="Embeddings per model.")
    models: list[str]
    avg_chunk_tokens: float
    applicable_strategies: list[str] = Field(description="Strategies it can run (default of `evaluate`).")
    inapplicable_strategies: dict[str, str] = Field(description="The others, each with why.")
    datasets: int
    runs: int
    last_run_at: str | None


class KnowledgeBaseList(BaseModel):
    knowledge_bases: list[KnowledgeBaseInfo]
