"""The evaluation report (docs/design.md §6.3; schema ``schemas/evaluation-report-v4.json`` is
:func:`json_schema` of :class:`Report`) and the views of a run's cases the console and Dagster read."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from rag_pipeline.contracts.label_check import STATUSES as LABEL_STATUSES
from rag_pipeline.contracts.metrics import Judged, Metrics
from rag_pipeline.contracts.runs import QueueInfo, RunLinks, RunSummary, Strict

REPORT_VERSION = 4
"""2: cases have ``relevance_grades``, candidates ``relevance_grade`` (graded labels). 3: ``candidates`` mode,
``summary.question_embeddings``, timings ``retrieval_wall_s`` / ``retrieval_sql_s`` / ``diagnosis_sql_s``. 4: candidates
have ``first_stage_rank`` (the rank before the rerank stage; null without one) and ``vector_completed`` /
``keyword_completed`` (a leg score filled in by ``complete_pool``: the leg did not retrieve the chunk)."""

CandidateMode = Literal["default", "all", "selected", "relevant", "none"]
CANDIDATE_MODES: tuple[str, ...] = get_args(CandidateMode)
"""Which candidates a report lists per case; ``default`` is the first."""


class Candidate(Strict):
    """One candidate of a case's pool (docs/design.md §4.1): every leg's score and rank, relevance and selection."""

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


class MissReason(Strict):
    """Why one relevant chunk of a case was missed (or ``hit``); fields that do not apply are absent (null ones,
    the pool context of a hit, all but the label detail of an invalid label)."""

    case_id: str
    chunk_id: str
    reason: str = Field(description="hit, below_cutoff, below_cutoff_after_rerank, vector_only, keyword_only, "
                                    "not_in_pool, or a label status")
    k: int
    rank: int | None = Field(None, description="final rank in the pool (pool members only)")
    legs: Literal["both", "vector", "keyword"] | None = Field(None, description="the leg(s) that put the chunk in "
                                                                               "the pool")
    final_score: float | None = None
    kth_score: float | None = None
    gap: float | None = Field(None, description="kth_score - final_score, for pool members below k")
    vector_score: float | None = Field(None, description="the chunk's own vector score: from the pool, or "
                                                         "computed for the question (absent: no embedding)")
    vector_rank: int | None = Field(None, description="the chunk's rank in the vector leg's pool; absent when the "
                                                      "leg did not return it (its exact rank among every chunk: "
                                                      "`rag-pipeline show RUN --case ID --global-ranks`)")
    keyword_score: float | None = Field(None, description="the chunk's own keyword score, as vector_score "
                                                          "(absent: no query term in the chunk)")
    keyword_rank: int | None = Field(None, description="as vector_rank, for the keyword leg")
    vector_last_score: float | None = Field(None, description="score of the last vector-leg member of the pool")
    vector_leg_size: int | None = None
    keyword_last_score: float | None = None
    keyword_leg_size: int | None = None
    enabled_legs: list[Literal["vector", "keyword"]] | None = None
    scores_computed: bool | None = Field(None, description="the missing legs' own scores were computed")
    label_detail: str | None = None
    first_stage_rank: int | None = Field(None, description="with a rerank stage: the chunk's rank before it")
    rerank_score: float | None = Field(None, description="with a rerank stage: the chunk's rerank score")
    detail: str = Field(description="the reason in words")

    @property
    def is_label_problem(self) -> bool:
        return self.reason in _INVALID_LABELS

    @model_serializer(mode="wrap")
    def _applying(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = {key: value for key, value in handler(self).items() if value is not None}
        if self.is_label_problem:
            return {key: data[key] for key in _LABEL_FIELDS if key in data}
        if self.reason == "hit":
            return {key: value for key, value in data.items() if "_last_" not in key and "leg_size" not in key}
        return data


_INVALID_LABELS = frozenset(LABEL_STATUSES) - {"ok"}
_LABEL_FIELDS = ("case_id", "chunk_id", "reason", "k", "label_detail", "detail")


class CaseReport(Strict):
    """One case of a run (docs/design.md §6.3): ids, grades, metrics, miss reasons and candidates."""

    case_id: str
    case_index: int
    question: str
    k: int
    answerable: bool = Field(True, description="false: the knowledge base has no answer (docs/design.md §12.1); "
                                               "the case is searched but not scored")
    retrieved_chunk_ids: list[str]
    relevant_chunk_ids: list[str]
    relevance_grades: dict[str, int]
    first_relevant_rank: int | None
    metrics: Metrics | None = Field(description="None for an unanswerable case (see metrics_skipped)")
    metrics_skipped: str | None = Field(None, description="why the case has no metrics, e.g. it is unanswerable")
    judged: Judged | None = Field(None, description="Judged@k and the pool's judged share (docs/metrics.md); null "
                                                    "for an unanswerable case")
    miss_reasons: list[MissReason] | None = Field(description="Why each relevant chunk was missed (`hit`, "
                                                              "`below_cutoff`, ...).")
    candidates: list[Candidate]

    @property
    def reasons(self) -> list[str]:
        """The distinct miss reasons other than ``hit`` (what the console filters cases by)."""
        return sorted({r.reason for r in self.miss_reasons or [] if r.reason != "hit"})


class JsonlHeader(Strict):
    """The first line of a JSON Lines report (then one :class:`CaseReport` per line)."""

    model_config = ConfigDict(title="rag_pipeline retrieval evaluation report, JSON Lines header (then one case "
                                    "per line)")
    report_version: Literal[4]  # REPORT_VERSION
    candidates: CandidateMode
    summary: RunSummary


class Report(JsonlHeader):
    """A whole run's report: its summary and every case."""

    model_config = ConfigDict(title="rag_pipeline retrieval evaluation report", json_schema_extra={
        "$id": f"https://rag-pipeline.invalid/schemas/evaluation-report-v{REPORT_VERSION}.json"})
    cases: list[CaseReport]


def json_schema(model: type[BaseModel]) -> dict:
    """The JSON Schema (draft 2020-12) of a contract, as published."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **model.model_json_schema()}


class RunCases(BaseModel):
    """A run's summary and every case of it in dataset order."""

    summary: RunSummary
    cases: list[CaseReport] = Field(description="Without candidates.")


class RelevantChunk(Strict):
    """A relevant chunk of a case: its document, pool rank (null: not in the pool) and miss reason."""

    chunk_id: str
    grade: int
    document_name: str | None
    rank: int | None
    reason: str | None
    detail: str | None
    gap: float | None


class CaseDetail(BaseModel):
    """One case of one run: the case, its whole candidate pool by rank, each relevant chunk, the cases around it."""

    summary: RunSummary
    case: CaseReport
    candidates: list[Candidate]
    relevant: list[RelevantChunk]
    previous: str | None = Field(description="The case before it (null: the first).")
    next: str | None = Field(description="The case after it (null: the last).")


class PairedCase(BaseModel):
    """A case two runs share: both metric sets and the delta (b - a) on the primary metric."""

    case_id: str
    question: str
    a: Metrics
    b: Metrics
    delta: float


class CaseDiagnosis(BaseModel):
    """One case of a stored run diagnosed now (``reasons``, with the exact global leg ranks of missed chunks)
    next to what the run stored (``stored_reasons``: own scores, pool ranks only)."""

    model_config = ConfigDict(frozen=True)
    run_id: str
    case_id: str
    question: str
    k: int
    reasons: list[MissReason]
    stored_reasons: list[MissReason] | None
    knowledge_base_state: str = Field(exclude=True, description="The KB row version the ranks were computed on.")


class TopCandidate(BaseModel):
    document_name: str
    chunk_id: str
    final_score: float
    is_relevant: bool
    relevance_grade: int | None


class CaseOverview(BaseModel):
    """A case's metrics and its top 3 selected candidates (the Dagster metadata tables)."""

    case_index: int
    case_id: str
    question: str
    k: int
    first_relevant_rank: int | None
    metrics: Metrics
    top3: list[TopCandidate]


class RunTables(BaseModel):
    """A run's summary, its first cases and its 10 worst cases (lowest nDCG, then RR)."""

    summary: RunSummary
    cases: list[CaseOverview]
    worst: list[CaseOverview]


class RunDetail(BaseModel):
    """A run's summary and a page of its cases (what :class:`EvaluationDetail` adds its page and links to)."""

    report_version: int
    summary: RunSummary
    cases: list[CaseReport]


class CasePage(BaseModel):
    offset: int
    limit: int
    returned: int = Field(description="Cases in this response.")
    total_cases: int = Field(description="Cases of the run (its dataset version's case count).")
    candidates: CandidateMode
    include_text: bool


class EvaluationDetail(RunDetail):
    """The run summary and a page of its cases with candidates (``report_version`` as in the CLI)."""

    page: CasePage
    links: RunLinks
    queue: QueueInfo | None = Field(None, description="Set while the run is queued.")


