"""Answers and their scores (docs/design.md §12): the answers file's line (:class:`AnswerRecord`,
``schemas/answers-v1.json``), the per-case answer metrics, verdicts and the run summary."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rag_pipeline.contracts.agreement import TwoRaterAgreement
from rag_pipeline.contracts.catalog import ChunkText
from rag_pipeline.contracts.judge import JudgeScore

MAX_ANSWER_CHARS = 100_000
MAX_CITED_IDS = 1000
MAX_RAW_RESPONSE_CHARS = 65_536
"""The collector keeps at most this many characters of an endpoint's reply (``raw_response``)."""


class HumanVerdict(BaseModel):
    """What a person decided about one answer (docs/answers.md, "Human verdicts"); each field optional."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", title="human verdict")

    correct: bool | None = Field(None, description="the answer is right (an unanswerable case: it refused)")
    faithful: bool | None = Field(None, description="every claim is supported by the chunks it cites")
    refusal_right: bool | None = Field(None, description="it refused exactly when the case is unanswerable")
    annotator: str | None = Field(None, max_length=200, description="who judged")


class AnswerRecord(BaseModel):
    """One line of an answers file: what a RAG system answered to one dataset case.

    ``status`` ``error`` marks a case the collector could not get an answer for (``error`` says why); such a
    line is listed as not answered and scored as missing, never as a wrong answer."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", title="answer line")

    case_id: str = Field(min_length=1, max_length=200, description="a case_id of the dataset")
    answer: str = Field("", max_length=MAX_ANSWER_CHARS, description="the system's answer text")
    cited_chunk_ids: list[str] | None = Field(
        None, max_length=MAX_CITED_IDS, description="chunk ids the answer cites, in order; kept as given "
                                                    "(an id that is not a chunk of the knowledge base is never valid)")
    retrieved_chunk_ids: list[str] | None = Field(
        None, max_length=MAX_CITED_IDS, description="the ranked chunk ids the system gave its generator")
    refused: bool | None = Field(None, description="the system's own refusal flag; absent: decided by the "
                                                   "refusal phrases (docs/design.md §12.4)")
    latency_ms: float | None = Field(None, ge=0, description="time to answer, milliseconds")
    answerer: str | None = Field(None, max_length=200, description="who answered: NAME or NAME@VERSION "
                                                                   "(every line of a file agrees)")
    status: Literal["ok", "error"] = Field("ok", description="written by the collector; error = no answer")
    error: str | None = Field(None, max_length=10_000, description="why the case has no answer (status error)")
    raw_response: str | None = Field(None, max_length=MAX_RAW_RESPONSE_CHARS,
                                     description="the endpoint's reply, cut at the cap")
    attempts: int | None = Field(None, ge=0, description="requests made for this case (collector)")
    human: HumanVerdict | None = Field(None, description="a person's verdict on this answer: the judge and the "
                                                         "rules are calibrated against it")


Verdict = Literal["correct", "retrieval_miss", "generation_miss", "citation_miss", "false_refusal",
                  "answered_unanswerable", "unscored"]
VERDICTS: tuple[str, ...] = Verdict.__args__  # type: ignore[attr-defined]
"""Why an answer failed, one per case (rules: docs/design.md §12.5), in the order reports list them."""

RefusalSource = Literal["flag", "phrase", "none", "empty"]
AnswerConvention = Literal["squad", "cmrc", "auto"]
"""How answer text is scored (docs/answers.md, "Answer conventions"): the SQuAD v2.0 rules for every reference,
the CMRC 2018 rules for every reference, or per reference by its script (``auto``)."""
ANSWER_CONVENTIONS: tuple[str, ...] = AnswerConvention.__args__  # type: ignore[attr-defined]


class AnswerMetrics(BaseModel):
    """The per-case answer metrics (definitions: docs/design.md §12.3 and each function's docstring)."""

    model_config = ConfigDict(extra="forbid")

    exact_match: float | None = None
    f1: float | None = None
    answer_contains: float | None = None
    key_point_recall: float | None = None
    citation_precision: float | None = None
    citation_recall: float | None = None
    citation_validity: float | None = None
    sentence_citation_coverage: float | None = None
    lexical_support: float | None = None
    answer_score: float | None = None
    refused: bool = False


ANSWER_METRIC_NAMES: tuple[str, ...] = tuple(n for n in AnswerMetrics.model_fields if n != "refused")
"""Every averaged answer metric, in the order of the tables' columns and every report."""
ANSWER_METRIC_LABELS = dict(zip(ANSWER_METRIC_NAMES, (
    "EM", "F1", "contains", "key pts", "cite P", "cite R", "cite valid", "cite cover", "support", "score"),
    strict=True))


class AnswerCitation(BaseModel):
    """One cited chunk id of an answer, as the labels and the record judge it."""

    chunk_id: str
    is_relevant: bool = Field(description="judged grade >= 1 for the case")
    grade: int | None = Field(None, description="the judged grade; None: not judged")
    is_retrieved: bool | None = Field(description="among the record's retrieved_chunk_ids; None: the record has none")
    in_knowledge_base: bool | None = Field(description="a chunk of the knowledge base; None: the knowledge "
                                                        "base's chunk ids were not given to the scoring")
    is_valid: bool = Field(description="counts for citation_validity (retrieved, or in the KB when the record "
                                       "sent no retrieved ids)")


class AnswerScoring(BaseModel):
    """The scoring settings: part of an answer run's identity (their hash is stored with it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    f1_correct_threshold: float = Field(0.8, ge=0, le=1, description="f1 at or above which an answer is correct")
    support_ngram: int = Field(4, ge=1, le=16, description="character n-gram size of lexical_support")
    support_threshold: float = Field(0.6, ge=0, le=1,
                                     description="share of a sentence's n-grams its cited chunks must contain")
    refusal_phrases: tuple[str, ...] | None = Field(
        None, description="phrases that mark a refusal; None = the documented default list")
    convention: AnswerConvention | None = Field(
        None, description="answer convention: squad, cmrc or auto (per reference); None = auto (runs stored "
                          "before conventions)")


class AnswerCaseResult(BaseModel):
    """One case of an answer run: the answer, its metrics, citations and verdict."""

    case_id: str
    question: str
    answer: str | None = Field(description="None: the case has no answer (missing line or status error)")
    status: Literal["ok", "error", "missing"]
    error: str | None = None
    reference_answers: list[str]
    key_points: list[str] = Field(default_factory=list)
    answerable: bool
    refused: bool
    refusal_source: RefusalSource
    verdict: Verdict
    verdict_reason: str
    answer_metrics: AnswerMetrics
    skipped: dict[str, str] = Field(default_factory=dict, description="metric -> why it is None for this case")
    citations: list[AnswerCitation] = Field(default_factory=list)
    relevant_chunk_ids: list[str] = Field(default_factory=list)
    retrieved_chunk_ids: list[str] | None = None
    latency_ms: float | None = None
    judge: JudgeScore | None = Field(None, description="the optional LLM judge's verdicts (docs/judge.md)")
    human: HumanVerdict | None = Field(None, description="the answers file's human verdict, if any")


class AnswerMetricSummary(BaseModel):
    """One metric over a run: the mean of the cases it is defined for, and how many it is not (and why)."""

    mean: float | None = Field(description="None when no case is scored")
    n_scored: int
    n_skipped: int
    skip_reasons: dict[str, int] = Field(default_factory=dict)


class FigureCalibration(BaseModel):
    """An automatic figure against the people's verdicts on the same answers (docs/answers.md, "Human
    verdicts"): κ, confusion matrix (rows people, columns the figure), base rates and n, or not calibrated."""

    figure: Literal["correct", "faithful", "refusal_right"]
    decided_by: str = Field(description="what decides the figure: rules, judge, or flag/phrases/judge")
    calibrated: bool
    reason: str | None = Field(None, description="why not calibrated")
    agreement: TwoRaterAgreement | None = None


class OfficialScores(BaseModel):
    """The figures the convention's official script prints, on its 0-100 scale (docs/answers.md, "Official
    formats"): SQuAD v2.0 ``exact``/``f1``/``total`` with the ``HasAns``/``NoAns`` split, or CMRC 2018
    ``EM``/``F1``/``AVERAGE``/``TOTAL``/``SKIP``."""

    convention: Literal["squad", "cmrc"]
    exact: float | None = Field(description="exact match, 0-100 (CMRC: EM)")
    f1: float | None = Field(description="F1, 0-100")
    total: int = Field(description="questions the figures are over")
    skipped: int = Field(0, description="questions without an answer (CMRC: SKIP, scored 0; SQuAD: left out)")
    not_scorable: int = Field(0, description="cases the script cannot score (an answerable case without "
                                             "references; CMRC: an unanswerable case), left out")
    average: float | None = Field(None, description="CMRC: (EM + F1) / 2")
    has_ans_exact: float | None = None
    has_ans_f1: float | None = None
    has_ans_total: int = 0
    no_ans_exact: float | None = None
    no_ans_f1: float | None = None
    no_ans_total: int = 0


class AnswerSummary(BaseModel):
    """An answer run's figures (docs/design.md §12.4)."""

    cases: int = Field(description="cases in the dataset")
    answered: int = Field(description="cases with an answer (status ok)")
    missing_case_ids: list[str] = Field(default_factory=list, description="cases without an answer (first 100)")
    missing: int
    errors: int = Field(description="lines with status error")
    coverage: float = Field(description="answered / cases")
    answerable_cases: int
    unanswerable_cases: int
    metrics: dict[str, AnswerMetricSummary]
    refusal_recall: AnswerMetricSummary = Field(description="refused among answered unanswerable cases")
    false_refusal_rate: AnswerMetricSummary = Field(description="refused among answered answerable cases")
    verdicts: dict[str, int] = Field(description="verdict -> cases, every verdict listed")
    latency_ms_p50: float | None = None
    latency_ms_p95: float | None = None
    faithfulness: AnswerMetricSummary | None = Field(None, description="the optional judge's faithfulness over "
                                                                       "the run; None: not judged (docs/judge.md)")
    convention: AnswerConvention | None = Field(None, description="the answer convention the run was scored by")
    official: OfficialScores | None = Field(None, description="the official script's figures (squad or cmrc "
                                                              "convention only)")
    calibration: list[FigureCalibration] = Field(default_factory=list, description="each automatic verdict "
                                                 "against the human verdicts; every judge figure listed")

    @field_validator("verdicts")
    @classmethod
    def _in_documented_order(cls, verdicts: dict[str, int]) -> dict[str, int]:
        """In :data:`VERDICTS` order, however it was read (a JSONB column keeps no key order)."""
        return {**{v: verdicts[v] for v in VERDICTS if v in verdicts}, **verdicts}


class AnswerRun(BaseModel):
    """A stored answer run: what was scored against what, and its summary."""

    run_id: str
    created_at: str
    dataset: str
    dataset_version: str
    knowledge_base: str
    knowledge_base_version: str | None
    answerer: str
    answerer_version: str
    scoring_version: str
    answers_sha256: str
    summary: AnswerSummary
    scoring: AnswerScoring | None = Field(None, description="the settings it was scored with (scoring_version "
                                                            "is their hash)")
    rescored_from: str | None = Field(None, description="the run whose stored answers this run re-scored")


class AnswerReport(BaseModel):
    """``answers evaluate`` / ``answers show`` / ``GET /answer-runs/{id}``: the run, its summary and cases."""

    run: AnswerRun | None = Field(description="None: scored without storing")
    summary: AnswerSummary
    cases: list[AnswerCaseResult]

    @property
    def stored_run(self) -> AnswerRun:
        """The run of a report that was stored (``answers evaluate --no-store`` stores none)."""
        if self.run is None:
            raise ValueError("the answers were scored without storing a run")
        return self.run


class AnswerRunList(BaseModel):
    """``answers runs`` / ``GET /answer-runs``: newest first."""

    runs: list[AnswerRun]
    total: int


class AnswerMetricComparison(BaseModel):
    """One metric of two answer runs over their common scored cases, with the paired statistics."""

    metric: str
    n: int
    mean_a: float | None
    mean_b: float | None
    delta: float | None
    p_value: float | None = Field(description="paired randomisation test (analysis/statistics.py); None: n < 2")
    ci_low: float | None = None
    ci_high: float | None = None


class AnswerComparison(BaseModel):
    """``answers compare A B`` / ``GET /answer-runs/compare``."""

    run_a: AnswerRun
    run_b: AnswerRun
    common_cases: int
    metrics: list[AnswerMetricComparison]
    verdict_changes: dict[str, int] = Field(description="'from->to' -> cases whose verdict changed")


class AnswerCaseDetail(BaseModel):
    """One case of a stored answer run with what its page shows beside it: the cited chunks' text, the
    neighbouring cases, and a retrieval run of the same dataset version holding the case (docs/design.md §12.6)."""

    run: AnswerRun
    case: AnswerCaseResult
    cited_chunks: dict[str, ChunkText] = Field(default_factory=dict, description="cited chunk id -> its text; "
                                                                                 "ids that name no chunk are absent")
    previous_case_id: str | None = None
    next_case_id: str | None = None
    retrieval_run_id: str | None = Field(None, description="a succeeded retrieval run on the same dataset version "
                                                           "(the baseline's current one first)")
    retrieval_strategy: str | None = None


DEFAULT_REQUEST_TEMPLATE = '{"question": "{question}", "case_id": "{case_id}", "k": "{k}"}'


class EndpointConfig(BaseModel):
    """How ``answers collect`` asks a RAG HTTP endpoint (docs/answers-collection.md, docs/design.md §12.2).

    ``headers`` are ``Name: value`` as given; a value ``env:NAME`` is read from the environment when the
    collection starts and is never printed, logged or stored (the field is left out of ``repr``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(min_length=1, max_length=8192, description="http(s) URL; may hold {question} {case_id} {k}")
    method: Literal["POST", "PUT", "GET"] = "POST"
    request_template: str = Field(DEFAULT_REQUEST_TEMPLATE, max_length=100_000,
                                  description="JSON body; {question} {case_id} {k} filled in its string values")
    answer_path: str = "answer"
    citations_path: str = "citations"
    contexts_path: str = "contexts"
    headers: tuple[str, ...] = Field((), repr=False, description="'Name: value' or 'Name: env:VAR'")
    concurrency: int = Field(4, ge=1, le=256)
    timeout_s: float = Field(30.0, gt=0, le=3600, description="whole request, body included")
    retries: int = Field(3, ge=0, le=20, description="retries after the first attempt")
    backoff_s: float = Field(0.5, ge=0, le=60, description="first backoff; doubles per retry")
    max_wait_s: float = Field(60.0, ge=0, le=3600, description="cap on one wait (backoff or Retry-After)")


class CollectionProgress(BaseModel):
    """What the collector reports after each finished case (the CLI's progress bar)."""

    done: int = Field(description="cases with a line: skipped_existing + answered + errors")
    total: int
    errors: int
    skipped_existing: int = 0
    latency_ms_p50: float | None = None
    latency_ms_p95: float | None = None


class CollectionResult(BaseModel):
    """``answers collect``: what was collected into the answers file (docs/answers-collection.md).

    ``failed`` with ``reason``: the endpoint could not be reached (after its retries) or no case was answered;
    the lines already written are kept and a new run resumes from them."""

    output: str
    total: int = Field(description="cases in the dataset")
    answered: int = Field(description="status ok lines written by this run")
    errors: int = Field(description="status error lines written by this run")
    skipped_existing: int = Field(description="cases already answered in the file (resumed)")
    not_asked: int = Field(0, description="cases left unasked because the collection stopped")
    requests: int = Field(0, description="HTTP requests made (retries included); 0 for an in-process answerer")
    latency_ms_p50: float | None = None
    latency_ms_p95: float | None = None
    status: Literal["succeeded", "failed"]
    reason: str | None = None
    answerer: str | None = None


class AnswerCollectionResponse(BaseModel):
    """``POST /datasets/{name}/answers/collect``: what was collected and, when stored, the answer run scored
    from it (docs/design.md §6.2). ``collection.output`` is empty: the server keeps no answers file."""

    collection: CollectionResult
    run: AnswerRun | None = Field(description="the stored run; None: the collection failed or store was false")
    summary: AnswerSummary | None = Field(None, description="the figures of the collected answers, when scored")


class PrunedAnswerRun(BaseModel):
    """An answer run retention removed (or, in a dry run, would remove)."""

    run_id: str
    dataset: str
    knowledge_base: str
    answerer: str
    answerer_version: str
    created_at: str
    cases: int
    bytes: int


def answers_json_schema() -> dict[str, Any]:
    """The JSON Schema of one answers-file line (``schemas/answers-v1.json``)."""
    schema = AnswerRecord.model_json_schema()
    schema.update({"$schema": "https://json-schema.org/draft/2020-12/schema",
                   "$id": "https://rag-pipeline.invalid/schemas/answers-v1.json",
                   "description": "One line of a JSON Lines answers file (one object per dataset case)."})
    return schema
