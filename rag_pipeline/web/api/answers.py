"""Answer runs over HTTP (docs/design.md §6.2, §12): score, list, read, compare and collect."""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from collections.abc import Callable
from pathlib import Path as FilePath
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from rag_pipeline.answers.answers_file import AnswersFileError
from rag_pipeline.contracts.answers import (
    ANSWER_CONVENTIONS,
    ANSWER_METRIC_NAMES,
    AnswerCollectionResponse,
    AnswerComparison,
    AnswerReport,
    AnswerRun,
    AnswerRunList,
    AnswerScoring,
    EndpointConfig,
    Verdict,
)
from rag_pipeline.evaluation.datasets.resolve import resolve_dataset
from rag_pipeline.service import answer_comparison, answers
from rag_pipeline.service.answer_collection import api_collection_file, collect_answers
from rag_pipeline.settings import get_settings
from rag_pipeline.storage.engine import TRANSIENT_ERRORS
from rag_pipeline.storage.http.guard import EndpointGuard, EndpointRefusedError, api_environ
from rag_pipeline.storage.names import DATASET, KNOWLEDGE_BASE, printable
from rag_pipeline.web.api.knowledge_bases import KnowledgeBaseId
from rag_pipeline.web.dependencies import Engine, Paging
from rag_pipeline.web.problems import PROBLEM_JSON, HTTPProblem, Problem, ProblemItem, check_content_length
from rag_pipeline.web.request_rules import (
    DATASET_NAME,
    DATASET_RULE,
    NAME_RULE,
    PRINTABLE,
    STRATEGY_RULE,
    TEXT_RULE,
    VERSION_RULE,
    check_form_fields,
    printable_text,
    valid_name,
)

router = APIRouter(tags=["answers"])
_DATABASE_ERRORS: tuple[type[Exception], ...] = (sa.exc.DBAPIError, *TRANSIENT_ERRORS)
MAX_UPLOAD_BYTES = 50 * 1024 * 1024
MULTIPART_OVERHEAD = 64 * 1024
MAX_COLLECT_CASES = 200
RETRY_AFTER_S = 10
DISCONNECT_POLL_S = 0.25
SORT_PATTERN = "^-?(" + "|".join(ANSWER_METRIC_NAMES) + ")$"
ENV_HEADER = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+:\s*env:[A-Za-z_][A-Za-z0-9_]*\s*$"
"""A collection over the API answers when it is done: larger datasets are collected with the CLI or Dagster."""
RunId = Annotated[str, Path(max_length=64, json_schema_extra=VERSION_RULE,
                            description="An answer run id, or a unique prefix of at least 4 hex "
                                                       "digits.")]

_CONVENTION = {"type": "string", "enum": list(ANSWER_CONVENTIONS),
               "description": "The answer convention (docs/answers.md); default: the knowledge base's text mode's."}
_UPLOAD_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {"schema": {"type": "object", "required": ["file", "dataset"],
                                           "additionalProperties": False, "properties": {
            "file": {"type": "string", "format": "binary", "description": "The answers file (JSON Lines, "
                                                                          "schemas/answers-v1.json)."},
            "dataset": {"type": "string", "maxLength": 200, "pattern": DATASET_NAME,
                        "description": "A dataset stored for this knowledge base."},
            "answerer": {"type": "string", "maxLength": 200, "pattern": PRINTABLE,
                         "description": "NAME or NAME@VERSION (default: the file's own)."},
            "convention": _CONVENTION}}},
        "application/json": {"schema": {"type": "object", "required": ["dataset", "answers"], "properties": {
            "dataset": {"type": "string", "maxLength": 200, "pattern": DATASET_NAME},
            "answerer": {"type": "string", "maxLength": 200, "pattern": PRINTABLE},
            "convention": _CONVENTION,
            "answers": {"type": "array", "items": {"type": "object"}, "description": "The answers file's lines."}}}},
    },
}


def _answers_problem(exc: AnswersFileError) -> HTTPProblem:
    items = [ProblemItem(message=p.message, line=p.describe(exc.source), field=p.field) for p in exc.problems]
    return HTTPProblem(422, str(exc), errors=items, title="Invalid answers file")


async def _upload(request: Request) -> tuple[bytes, str, str, str | None, str | None]:
    """``(answers bytes, file name, dataset, answerer, convention)`` of a multipart or JSON upload."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        check_content_length(request, MAX_UPLOAD_BYTES + MULTIPART_OVERHEAD, "of an answers file is 50 MB")
        form = await request.form(max_files=1, max_fields=5)
        upload, dataset, answerer = form.get("file"), form.get("dataset"), form.get("answerer")
        convention = form.get("convention")
        if not isinstance(upload, UploadFile):
            raise HTTPProblem(422, "the multipart body has no `file` part holding the answers file")
        check_form_fields(form, {"file", "dataset", "answerer", "convention"})
        raw = await upload.read(MAX_UPLOAD_BYTES + 1)
        if len(raw) > MAX_UPLOAD_BYTES:
            raise HTTPProblem(413, f"{printable(upload.filename)}: over the answers-file limit of 50 MB")
        filename = upload.filename or "answers.jsonl"
    elif content_type.startswith("application/json"):
        check_content_length(request, MAX_UPLOAD_BYTES, "of an answers file is 50 MB")
        try:  # strictly: too deep a nesting, a duplicate key (never last-wins), NaN are named, not a 500
            body = answers.read_json_upload(await request.body())
        except answers.AnswersRequestError as exc:
            raise HTTPProblem(422, str(exc)) from None
        dataset, answerer, convention = body.get("dataset"), body.get("answerer"), body.get("convention")
        raw = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in body["answers"]).encode("utf-8")
        filename = "request body"
    else:
        raise HTTPProblem(415, f"send the answers as multipart/form-data (a `file` part) or application/json, "
                               f"not {printable(content_type[:100])}", title="Unsupported media type")
    if not isinstance(dataset, str) or not dataset.strip():
        raise HTTPProblem(422, "name the `dataset` the answers are for (a dataset stored for this knowledge base)")
    if answerer is not None and (not isinstance(answerer, str) or len(answerer) > 200):
        raise HTTPProblem(422, "`answerer` must be a string NAME or NAME@VERSION of at most 200 characters")
    if convention is not None and convention not in ANSWER_CONVENTIONS:
        raise HTTPProblem(422, f"`convention` must be one of {', '.join(ANSWER_CONVENTIONS)}, got "
                               f"{printable(str(convention)[:60])}")
    return raw, filename, dataset.strip(), answerer or None, convention


@router.post("/knowledge-bases/{id}/answer-runs", response_model=AnswerRun, status_code=201,
             summary="Score an answers file", openapi_extra={"requestBody": _UPLOAD_BODY},
             responses={413: {"description": "Over 50 MB."},
                        415: {"description": "Neither multipart/form-data nor JSON."}})
async def create_answer_run(request: Request, engine: Engine, id: str = KnowledgeBaseId):  # noqa: A002
    """Score an answers file against a stored dataset of this knowledge base and store the run: 201 with the
    run (its summary) and its `Location`. A bad file → 422 whose `errors` list every problem with its line and
    field; nothing is stored."""
    raw, filename, dataset, answerer, convention = await _upload(request)
    try:
        report = answers.evaluate_answers(engine, id, dataset, raw, answerer=answerer, filename=filename,
                                          stored_only=True, scoring=AnswerScoring(convention=convention))
    except AnswersFileError as exc:
        raise _answers_problem(exc) from None
    run = report.stored_run
    return JSONResponse(run.model_dump(mode="json"), status_code=201,
                        headers={"Location": f"/api/v1/answer-runs/{run.run_id}"})


@router.get("/answer-runs", response_model=AnswerRunList, summary="List answer runs")
def list_answer_runs(engine: Engine, page: Paging,
                     dataset: Annotated[str | None, Query(max_length=200, json_schema_extra=DATASET_RULE,
                                                          description="Only this dataset."),
                                        valid_name(DATASET)] = None,
                     answerer: Annotated[str | None, Query(max_length=200, json_schema_extra=TEXT_RULE,
                                                           description="Only this answerer."),
                                         AfterValidator(printable_text)] = None,
                     knowledge_base: Annotated[str | None, Query(max_length=100, json_schema_extra=NAME_RULE,
                                                                 description="Only this knowledge "
                                                                 "base (name or id)."),
                                               valid_name(KNOWLEDGE_BASE)] = None):
    """Stored answer runs, newest first, with `total` for paging."""
    return answers.list_answer_runs(engine, dataset=dataset, knowledge_base=knowledge_base, answerer=answerer,
                                    limit=page.limit, offset=page.offset)


@router.get("/answer-runs/compare", response_model=AnswerComparison, summary="Compare two answer runs")
def compare_answer_runs(engine: Engine,
                        a: Annotated[str, Query(max_length=64, json_schema_extra=VERSION_RULE,
                                                description="Run A (id or prefix).")],
                        b: Annotated[str, Query(max_length=64, json_schema_extra=VERSION_RULE,
                                                description="Run B, compared with A.")]):
    """Run B against run A over their common cases: per metric the paired means, delta, permutation p-value and
    bootstrap interval; the verdict changes (the shape of `rag-pipeline answers compare --format json`)."""
    return answer_comparison.compare_answer_runs(engine, a, b)


@router.get("/answer-runs/{run_id}", response_model=AnswerReport, summary="An answer run with its cases")
def get_answer_run(engine: Engine, run_id: RunId,
                   verdict: Annotated[Verdict | None, Query(description="Only this verdict.")] = None,
                   sort: Annotated[str | None, Query(max_length=60, json_schema_extra={"pattern": SORT_PATTERN},
                                                     description="An answer metric (ascending), "
                                                     "`-metric` descending; undefined values last.")] = None,
                   wrong_but_confident: Annotated[bool, Query(description="Only wrong answers that cite a chunk "
                                                              "or are lexically supported.")] = False):
    """The run, its summary and its cases (answer, metrics, citations marked relevant / retrieved, verdict) —
    `rag-pipeline answers show --format json`; 404 when no run has that id."""
    return answers.get_answer_run(engine, run_id, verdict=verdict, sort=sort, wrong_but_confident=wrong_but_confident)


class ApiEndpointConfig(EndpointConfig):
    """The endpoint of a collection asked over HTTP: as the CLI's, but each header value is `env:NAME` (a variable
    of the server's `RAG_COLLECT_ENV`), the URL one the operator allowed, and tighter caps."""

    headers: tuple[Annotated[str, Field(max_length=1000, json_schema_extra={"pattern": ENV_HEADER})], ...] = Field(
        (), repr=False, max_length=20,
        description="'Name: env:VAR', VAR a variable the server's RAG_COLLECT_ENV allows (never RAG_*).")
    concurrency: int = Field(4, ge=1, le=16, description="requests in flight at once")
    timeout_s: float = Field(30.0, gt=0, le=60, description="whole request, body included")
    retries: int = Field(3, ge=0, le=5, description="retries after the first attempt")
    backoff_s: float = Field(0.5, ge=0, le=10, description="first backoff; doubles per retry")
    max_wait_s: float = Field(30.0, ge=0, le=30, description="cap on one wait (backoff or Retry-After)")


class CollectRequest(BaseModel):
    """What to ask: a RAG endpoint (`endpoint`) or an in-process answerer (`answerer`), for a stored dataset."""

    model_config = ConfigDict(extra="forbid")
    knowledge_base: str = Field(max_length=200, json_schema_extra=NAME_RULE,
                                description="The knowledge base the dataset is "
                                                                          "stored for.")
    endpoint: ApiEndpointConfig | None = Field(None, description="The RAG endpoint: one the server's "
                                               "RAG_COLLECT_ENDPOINTS lists (or a public address with "
                                               "RAG_COLLECT_PUBLIC_ENDPOINTS=1); header values only `env:NAME`.")
    answerer: str | None = Field(None, max_length=200, json_schema_extra=TEXT_RULE,
                                 description="An in-process answerer, e.g. extractive-v1.")
    strategy: str | None = Field(None, max_length=100, json_schema_extra=STRATEGY_RULE,
                                 description="With `answerer`: its retrieval strategy.")
    store: bool = Field(True, description="Score the collected answers and store the answer run.")


def _header_environ(endpoint: EndpointConfig) -> dict[str, str]:
    """The variables the headers read, from those ``RAG_COLLECT_ENV`` allows; one error for a variable that is
    not allowed and one that is not set (which variables exist is not told)."""
    allowed = api_environ()
    for number, header in enumerate(endpoint.headers, 1):
        name, sep, value = header.partition(":")
        value = value.strip()
        if not sep or not value.startswith("env:"):
            raise HTTPProblem(422, f"header number {number} ({printable(name.strip()[:100])}): over the API a header "
                                   "value must be env:NAME, read from the server's environment (the value is "
                                   "not shown)")
        if value[len("env:"):].strip() not in allowed:
            raise HTTPProblem(422, f"header number {number} ({printable(name.strip()[:100])}): its env: variable is "
                                   "not one the API may read (the server's RAG_COLLECT_ENV lists those; RAG_* "
                                   "never), or it is not set")
    return allowed


async def _check_endpoint(endpoint: EndpointConfig) -> EndpointGuard:
    guard = EndpointGuard.from_settings()
    try:
        await guard.precheck(endpoint.url)
    except EndpointRefusedError as exc:
        raise HTTPProblem(403, str(exc), title="Endpoint not allowed") from None
    return guard


class _Collections:
    """The collections this app runs (``app.state.collections``): their answers files."""

    def __init__(self) -> None:
        self.running: set[FilePath] = set()

    def check_room(self) -> None:
        if len(self.running) >= get_settings().collect_slots:
            raise HTTPProblem(429, f"{len(self.running)} answer collections are running, as many as the server runs "
                                   "at once (RAG_COLLECT_SLOTS); try again later",
                              title="Too many collections", headers={"Retry-After": str(RETRY_AFTER_S)})

    @classmethod
    def of(cls, request: Request) -> _Collections:
        state = request.app.state
        if getattr(state, "collections", None) is None:
            state.collections = cls()
        return state.collections


async def _until_done_or_gone(request: Request, cancel: threading.Event, work: Callable[[], Any]) -> Any:
    """``work()`` in a worker thread; ``cancel`` is set when the HTTP client goes away (the work then stops)."""
    task = asyncio.ensure_future(run_in_threadpool(work))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if not cancel.is_set() and await request.is_disconnected():
                cancel.set()
    except asyncio.CancelledError:  # the server stops: so does the collection
        cancel.set()
        raise


def _database_problem(kept: int) -> HTTPProblem:
    where = (f"; the {kept} answer line(s) collected are kept on the server and the same request resumes from "
             "them" if kept else "")
    return HTTPProblem(503, f"the database could not be reached, so the answers were not stored{where}",
                       title="Database unavailable", headers={"Retry-After": str(RETRY_AFTER_S)})


def _problem(description: str) -> dict[str, Any]:
    return {"model": Problem, "description": description, "content": {PROBLEM_JSON: {}}}


def _lines(path: FilePath) -> int:
    try:
        with path.open("rb") as handle:
            return sum(1 for line in handle if line.strip())
    except OSError:
        return 0


@router.post("/datasets/{name}/answers/collect", response_model=AnswerCollectionResponse,
             summary="Collect a dataset's answers from a RAG endpoint (synchronous, bounded)",
             responses={201: {"model": AnswerCollectionResponse,
                              "description": "Collected and stored as an answer run (`Location`)."},
                        403: _problem("The endpoint is not one the operator allowed the API to call."),
                        409: _problem("The same collection is running."),
                        429: _problem("As many collections as RAG_COLLECT_SLOTS are running; see Retry-After."),
                        503: _problem("The database is unavailable; collected answers are kept.")})
async def collect(request: Request, engine: Engine, body: CollectRequest,
                  name: Annotated[str, Path(max_length=200, json_schema_extra=DATASET_RULE,
                                            description="A dataset stored for the knowledge base.")]):
    """Ask the endpoint (or the answerer) every case of the dataset's latest version, then score and store the
    answers as an answer run: 201 with `Location` when stored, 200 otherwise (the collection's figures; a
    failed collection says why in `collection.reason`). At most 200 cases: larger datasets are collected with
    `rag-pipeline answers collect` or the Dagster `answers` asset.

    The endpoint must be one the operator allowed (`RAG_COLLECT_ENDPOINTS`, or a public address with
    `RAG_COLLECT_PUBLIC_ENDPOINTS=1`), else 403; a header's `env:` variable one of `RAG_COLLECT_ENV` (never
    `RAG_*`), else 422. At most `RAG_COLLECT_SLOTS` collections run at once (one more → 429 with `Retry-After`);
    a client that goes away stops its collection. Collected answers that could not be stored (the database
    went away, the client left, the endpoint stopped answering) are kept on the server: the same request
    resumes from them."""
    environ, guard = None, None
    if body.endpoint is not None:
        environ = _header_environ(body.endpoint)
        guard = await _check_endpoint(body.endpoint)
    elif body.answerer is None:
        raise HTTPProblem(422, "give exactly one of `endpoint` and `answerer`")
    collections = _Collections.of(request)
    collections.check_room()  # before the database is asked; again below, where the slot is taken
    try:
        data = (await run_in_threadpool(lambda: resolve_dataset(engine, name, knowledge_base=body.knowledge_base,
                                                                 source="stored"))).dataset
    except _DATABASE_ERRORS:
        raise _database_problem(0) from None
    if len(data.cases) > MAX_COLLECT_CASES:
        raise HTTPProblem(422, f"dataset {printable(data.name)} has {len(data.cases)} cases; the API collects at "
                               f"most {MAX_COLLECT_CASES} (use `rag-pipeline answers collect`)")
    output = api_collection_file(data, body.endpoint, body.answerer, body.strategy)
    if output in collections.running:
        raise HTTPProblem(409, "the same collection (this dataset version, endpoint or answerer) is running; wait "
                               "for its answer", title="Collection running")
    collections.check_room()
    collections.running.add(output)
    try:
        cancel = threading.Event()
        try:
            result = await _until_done_or_gone(request, cancel, functools.partial(
                collect_answers, data, output, endpoint=body.endpoint, answerer=body.answerer,
                knowledge_base=data.knowledge_base, strategy=body.strategy, environ=environ, guard=guard,
                cancel=cancel))
        except _DATABASE_ERRORS:  # an in-process answerer searches the database
            raise _database_problem(_lines(output)) from None
        if cancel.is_set():  # nobody reads this answer
            raise HTTPProblem(400, "the client went away; the collection was stopped and its answers are kept")
        result = result.model_copy(update={"output": ""})
        if result.status == "failed":
            return AnswerCollectionResponse(collection=result, run=None)
        if not body.store:
            output.unlink(missing_ok=True)
            return AnswerCollectionResponse(collection=result, run=None)
        raw = output.read_bytes()
        try:
            report = await run_in_threadpool(answers.evaluate_answers, engine, body.knowledge_base, name, raw,
                                             filename="collected answers", stored_only=True)
        except _DATABASE_ERRORS:
            raise _database_problem(_lines(output)) from None
        output.unlink(missing_ok=True)
    finally:
        collections.running.discard(output)
    out: dict[str, Any] = AnswerCollectionResponse(collection=result, run=report.run,
                                                   summary=report.summary).model_dump(mode="json")
    return JSONResponse(out, status_code=201, headers={"Location": f"/api/v1/answer-runs/{report.stored_run.run_id}"})
