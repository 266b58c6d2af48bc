"""docs/design.md §6.2: launch an evaluation (``POST .../retrieval/evaluate``), the run history
(``GET .../retrieval/runs``) and a run's detail with its candidates (``GET /retrieval/evaluations/{run_id}``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from rag_pipeline.contracts.catalog import DatasetVersion, UploadResult
from rag_pipeline.contracts.reports import CandidateMode, CasePage, EvaluationDetail
from rag_pipeline.contracts.runs import EvaluateResponse, LaunchedRun, RunItem, RunLinks, RunPage, RunStatus
from rag_pipeline.evaluation.runs.reports import CaseNotFoundError
from rag_pipeline.knowledge_base.lifecycle import resolve_knowledge_base
from rag_pipeline.service import applicability, evaluations, stored_datasets
from rag_pipeline.service.queued_runs import queue_evaluations
from rag_pipeline.storage.names import DATASET, STRATEGY_VERSION, check_name
from rag_pipeline.web.api.knowledge_bases import KnowledgeBaseId
from rag_pipeline.web.dependencies import Engine, Paging, Queue
from rag_pipeline.web.problems import HTTPProblem
from rag_pipeline.web.request_rules import DATASET_RULE, STRATEGY_RULE, VERSION_RULE, valid_name

router = APIRouter(tags=["evaluations"])


async def _raw_body(request: Request) -> bytes:
    """The request's bytes as sent (already read for ``body``): inline cases are read from them strictly."""
    return await request.body()


RawBody = Annotated[bytes, Depends(_raw_body)]
MAX_CASE_PAGE = 1000
StrategyVersion = Annotated[str, Field(min_length=1, max_length=100, json_schema_extra=STRATEGY_RULE)]


class EvaluateRequest(BaseModel):
    """What to evaluate: a stored dataset (by name) or inline cases, and the strategies."""

    model_config = ConfigDict(extra="forbid")
    dataset: str | None = Field(None, max_length=200, json_schema_extra=DATASET_RULE,
                                description="Name of a dataset stored for this knowledge "
                                                                  "base (uploaded or evaluated before).")
    dataset_version: str | None = Field(None, max_length=64, json_schema_extra=VERSION_RULE,
                                        description="With `dataset`: a version hash or a "
                                                                         "prefix of one (default: the latest).")
    cases: list[Any] | None = Field(None, description="Inline cases in the file format (docs/design.md §2), validated "
                                                      "like a file; stored as a version of dataset `name`.")
    name: str | None = Field(None, max_length=200, json_schema_extra=DATASET_RULE,
                             description="With `cases`: the dataset's name.")
    strategy_versions: list[StrategyVersion] | None = Field(None, min_length=1, max_length=100,
                                                            description="Default: every strategy the "
                                                "knowledge base can run (it has the strategy's embedding model).")
    strict: bool = Field(False, description="Refuse when any label is not a searchable chunk (like --strict).")


def no_case_results_yet(summary) -> str | None:
    """Why a run that is not ``succeeded`` has no case to show (its case results are stored in one transaction
    when it succeeds, docs/design.md §4.2); None for a succeeded run (a case it lacks is really not there)."""
    run = f"run {summary.run_id[:8]} ({summary.strategy_version})"
    total = summary.dataset.case_count
    if summary.status == "queued":
        return f"{run} is queued: it has no case results until it has run; ask again once it has succeeded"
    if summary.status == "running":
        return (f"{run} is running ({summary.cases_done} of {total} cases done): its case results are stored when "
                "it succeeds; ask again then")
    if summary.status in ("failed", "abandoned"):
        return f"{run} {summary.status} and stored no case results" + (f": {summary.error}" if summary.error else "")
    return None


def run_links(run_id: str, knowledge_base: str) -> RunLinks:
    return RunLinks(self=f"/api/v1/retrieval/evaluations/{run_id}",
                    knowledge_base_runs=f"/api/v1/knowledge-bases/{knowledge_base}/retrieval/runs")


@router.post("/knowledge-bases/{id}/retrieval/evaluate", response_model=EvaluateResponse, status_code=202,
             summary="Evaluate strategies on a dataset (asynchronous)",
             responses={409: {"description": "A strategy version was first run with other parameters."},
                        422: {"description": "Bad input, or a strategy the knowledge base cannot run (the detail "
                                             "names it and the missing model)."}})
def evaluate(body: EvaluateRequest, engine: Engine, queue: Queue, raw_body: RawBody,
             id: str = KnowledgeBaseId):  # noqa: A002
    """Queue one evaluation run per strategy (default: every strategy the knowledge base can run) on a stored
    dataset (`dataset`, optionally `dataset_version`) or on inline `cases` (validated like a file, stored as a
    version of dataset `name`); Dagster's `queued_evaluations` sensor runs them as one `evaluate_strategies` run
    (a step and a partition `<dataset>|<strategy>` per strategy). Answers 202 at once: the runs are `queued`; poll
    `links.self` (`queued` → `running` with `cases_done` → `succeeded` | `failed` | `abandoned`). `queue.message`
    says when no Dagster daemon is picking runs up, and how to start one. Labels are checked first (docs/design.md
    §8): none valid → 422, nothing queued; some invalid → `label_warning`."""
    with engine.connect() as conn:
        kb_ref = resolve_knowledge_base(conn, id)
    kb = kb_ref.name
    if (body.dataset is None) == (body.cases is None):
        raise HTTPProblem(422, "give either `dataset` (the name of a stored dataset) or `cases` (inline cases "
                               "with a `name`), not both or neither")
    applicability.choose_strategies(engine, kb_ref, body.strategy_versions)  # unknown/inapplicable: 422 before storing
    if body.cases is not None:
        if not body.name:
            raise HTTPProblem(422, "inline `cases` need a dataset `name`")
        check_name(DATASET, body.name)
        # read again strictly, like a file
        dataset: UploadResult | DatasetVersion = stored_datasets.store_inline_cases(engine, kb, raw_body, body.name)
    else:
        dataset = stored_datasets.find_dataset(engine, kb_ref, str(body.dataset), body.dataset_version)
    queued = queue_evaluations(engine, kb, dataset.dataset_id, body.strategy_versions, strict=body.strict)
    runs = [LaunchedRun(run_id=r.run_id, status=r.status, strategy_version=r.strategy_version,
                        partition_key=r.partition_key, dagster_run_id=r.dagster_run_id, links=run_links(r.run_id, kb))
            for r in queued.runs]
    body_out = EvaluateResponse(dataset=dataset.name, dataset_id=dataset.dataset_id,
                                dataset_version=dataset.version, knowledge_base=kb, runs=runs,
                                label_warning=queued.label_warning, queue=queue)
    return JSONResponse(body_out.model_dump(), status_code=202,
                        headers={"Location": runs[0].links.self} if runs else None)


@router.get("/knowledge-bases/{id}/retrieval/runs", response_model=RunPage, summary="Run history")
def list_runs(engine: Engine, queue: Queue, page: Paging, id: str = KnowledgeBaseId,  # noqa: A002
              dataset: Annotated[str | None, Query(max_length=200, json_schema_extra=DATASET_RULE,
                                                   description="Only this dataset."), valid_name(DATASET)] = None,
              strategy: Annotated[str | None, Query(max_length=100,
                                                    json_schema_extra=STRATEGY_RULE,
                                                    description="Only this strategy."),
                                  valid_name(STRATEGY_VERSION)] = None,
              status: Annotated[RunStatus | None, Query(description="Only runs with this status.")] = None,
              current: Annotated[bool, Query(description="Only the current run of each dataset × strategy "
                                                         "(what comparisons use).")] = False):
    """Evaluation runs of this knowledge base, newest first (latest submitted), with filters and pagination
    (`limit`, `offset`, `total`). Each run is its summary plus links; `queue` says whether queued runs will
    start."""
    total, summaries = evaluations.run_page(engine, knowledge_base=id, dataset=dataset, strategy=strategy,
                                            status=status, current_only=current, limit=page.limit,
                                            offset=page.offset)
    return RunPage(total=total, limit=page.limit, offset=page.offset, queue=queue,
                   runs=[RunItem(**dict(s), links=run_links(s.run_id, s.knowledge_base.name)) for s in summaries])


@router.get("/retrieval/evaluations/{run_id}", response_model=EvaluationDetail, response_model_exclude_unset=True,
            summary="A run's detail with per-case candidates (docs/design.md §6.3)",
            responses={409: {"description": "`case_id` given on a run that is queued, running or failed: the "
                                            "detail says which (it has no case results yet)."}})
def get_evaluation(engine: Engine, queue: Queue,
                   run_id: Annotated[str, Path(max_length=64, json_schema_extra=VERSION_RULE,
                                               description="A run id, or a unique prefix of at "
                                                                          "least 4 hex digits.")],
                   candidates: Annotated[CandidateMode, Query(description=(
                       "Which candidates each case lists: `default` = the selected ones plus every relevant one "
                       "(`miss_reasons` diagnose the missed relevant chunks), `all` = the whole pool, `selected`, "
                       "`relevant`, `none`."))] = "default",
                   case_id: Annotated[str | None, Query(min_length=1, max_length=500,
                                                        description="Only this case.")] = None,
                   offset: Annotated[int, Query(ge=0, le=10_000_000, description="Cases to skip.")] = 0,
                   limit: Annotated[int, Query(ge=1, le=MAX_CASE_PAGE, description="Cases per page.")] = 100,
                   include_text: Annotated[bool, Query(description="Add each candidate's chunk text (`content`), "
                                                                   "looked up live; never stored.")] = False):
    """The run summary and a page of its cases in dataset order, each with ids, grades, metrics, miss reasons
    and candidates (vector / keyword / final score and rank, relevant, selected) — the shape of
    `rag-pipeline show`. A queued or running run has a summary (`status`, `cases_done`) and no cases yet (with
    `case_id`: 409 saying so)."""
    try:
        detail = evaluations.evaluation_detail(engine, run_id, candidates=candidates, case_id=case_id,
                                               offset=offset, limit=limit, include_text=include_text)
    except CaseNotFoundError:
        why = no_case_results_yet(evaluations.run_summaries(engine, [run_id])[0])
        if why is None:
            raise
        raise HTTPProblem(409, why) from None
    s = detail.summary
    page = CasePage(offset=0 if case_id else offset, limit=limit, returned=len(detail.cases),
                    total_cases=s.dataset.case_count, candidates=candidates, include_text=include_text)
    queued = {"queue": queue} if s.status == "queued" else {}
    return EvaluationDetail(**dict(detail), page=page, links=run_links(s.run_id, s.knowledge_base.name), **queued)
