"""Every error of the HTTP service as RFC 9457 problem details (``application/problem+json``), never a traceback
(docs/http-api.md, "Errors"); a bug or a database failure names only an ``error_id`` found in the server log."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from rag_pipeline.contracts.errors import USER_ERRORS, http_status
from rag_pipeline.evaluation.datasets.strict_json import DatasetError
from rag_pipeline.storage.engine import TRANSIENT_ERRORS
from rag_pipeline.storage.files import FileWriteError
from rag_pipeline.storage.names import printable
from rag_pipeline.storage.urls import mask_secrets

PROBLEM_JSON = "application/problem+json"
log = logging.getLogger("rag_pipeline.web")

_TITLES = {400: "Bad request", 401: "Unauthorized", 403: "Forbidden", 404: "Not found", 405: "Method not allowed",
           409: "Conflict", 413: "Content too large", 415: "Unsupported media type", 422: "Invalid input",
           500: "Internal error", 503: "Database unavailable"}


class ProblemItem(BaseModel):
    """One problem of an invalid request or dataset (the CLI prints each as one line: ``line``)."""

    message: str = Field(description="What is wrong, as the CLI says it.")
    line: str | None = Field(None, description="The whole line the CLI prints (source, case, field, message).")
    case_index: int | None = Field(None, description="0-based index of the case (`cases[i]`), if about one case.")
    case_id: str | None = Field(None, description="The case's `case_id`, when it has a readable one.")
    field: str | None = Field(None, description="The field of the case or file (`k`, `relevant_chunk_ids[2]`).")
    location: list[str | int] | None = Field(None, description="Where in the request (`body`, `query`, ...).")


class Problem(BaseModel):
    """RFC 9457 problem details."""

    type: str = Field("about:blank", description="A URI naming the problem type (`about:blank`: see `status`).")
    title: str = Field(description="Short summary of the status.")
    status: int = Field(description="The HTTP status code.")
    detail: str = Field(description="What went wrong and what to do, the same text the CLI prints.")
    instance: str | None = Field(None, description="The request path.")
    errors: list[ProblemItem] | None = Field(None, description="Every problem, when there are several.")
    error_id: str | None = Field(None, description="Internal errors only: the id to look up in the server log.")


PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": Problem, "description": _TITLES[code], "content": {PROBLEM_JSON: {}}}
    for code in (401, 403, 404, 422, 503)
}
"""``responses=`` of a route: the problem statuses every API route can answer with."""


class HTTPProblem(Exception):  # noqa: N818 - raised to produce a response, like HTTPException
    """Raise to answer with a problem (``status``, ``detail``, optional ``errors`` and headers)."""

    def __init__(self, status: int, detail: str, *, errors: list[ProblemItem] | None = None,
                 headers: dict[str, str] | None = None, title: str | None = None):
        super().__init__(detail)
        self.status, self.detail, self.errors, self.headers, self.title = status, detail, errors, headers, title


def problem_response(request: Request | None, status: int, detail: str, *, errors: list[ProblemItem] | None = None,
                     headers: dict[str, str] | None = None, title: str | None = None,
                     error_id: str | None = None) -> JSONResponse:
    body = Problem(title=title or _TITLES.get(status, "Error"), status=status, detail=mask_secrets(detail),
                   instance=request.url.path if request is not None else None, errors=errors, error_id=error_id)
    content = _encodable({k: v for k, v in body.model_dump().items() if v is not None})  # items keep null fields
    return JSONResponse(content, status_code=status, headers=headers, media_type=PROBLEM_JSON)


def _encodable(value: Any) -> Any:
    """``value`` with every string made UTF-8 encodable: a lone surrogate echoed from the input (a case_id, a label
    key, a query parameter) becomes its ``\\udfff`` escape instead of failing the response with a 500."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "".join(f"\\u{ord(c):04x}" if "\ud800" <= c <= "\udfff" else c for c in value)
        return value
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encodable(v) for v in value]
    return value


def dataset_problems(exc: DatasetError) -> list[ProblemItem]:
    """Every problem of an invalid dataset, each with its case index, case id and field."""
    return [ProblemItem(message=p.message, line=p.describe(exc.source), case_index=p.case_index,
                        case_id=p.case_id, field=p.field) for p in exc.problems]


def status_of(exc: BaseException) -> int:
    """The HTTP status of a service exception: its kind's; a dropped database connection is 503."""
    return 503 if isinstance(exc, TRANSIENT_ERRORS) else http_status(exc)


def database_failure(exc: BaseException) -> str:
    """What a caller of the API may learn of a database failure: unreachable, or the statement's SQLSTATE —
    never the driver's text, which names the server's host, port or socket path."""
    orig = getattr(exc, "orig", None)
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if code and not str(code).startswith("08"):  # class 08: connection exception
        return f"the database refused the statement (SQLSTATE {code})"
    return "the database cannot be reached"


def _logged(request: Request, exc: BaseException, what: str) -> str:
    error_id = uuid.uuid4().hex[:12]
    log.error("%s %s on %s %s: %s", what, error_id, request.method, request.url.path,
              mask_secrets(str(exc)[:2000]))
    return error_id


def _validation_items(exc: RequestValidationError) -> list[ProblemItem]:
    items = []
    for err in exc.errors():
        loc = [part if isinstance(part, int) else str(part) for part in err.get("loc", ())]
        where = ".".join(str(p) for p in loc[1:]) or (str(loc[0]) if loc else "request")
        field: str | None = where
        if err.get("type") == "json_invalid":  # loc is (body, character offset): a position, not a field
            where = f"{loc[0]} (character {loc[1]})" if len(loc) > 1 else str(loc[0] if loc else "body")
            field = None
        items.append(ProblemItem(message=printable(str(err.get("msg", "invalid"))), line=f"{where}: {err.get('msg')}",
                                 field=field, location=loc))
    return items


def install(app: FastAPI) -> None:
    """Register the handlers that turn every exception into problem details."""

    @app.exception_handler(HTTPProblem)
    async def _problem(request: Request, exc: HTTPProblem):
        return problem_response(request, exc.status, exc.detail, errors=exc.errors, headers=exc.headers,
                                title=exc.title)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        detail = exc.detail if isinstance(exc.detail, str) else _TITLES.get(exc.status_code, "Error")
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no such path {printable(request.url.path)} (the API is under /api/v1; see /docs)"
        return problem_response(request, exc.status_code, detail, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        items = _validation_items(exc)
        detail = f"invalid request: {len(items)} problem(s): " + "; ".join(i.line or i.message for i in items[:10])
        return problem_response(request, 422, detail, errors=items)

    @app.exception_handler(DatasetError)
    async def _dataset(request: Request, exc: DatasetError):
        return problem_response(request, 422, str(exc), errors=dataset_problems(exc), title="Invalid dataset")

    async def _user(request: Request, exc: Exception):
        if isinstance(exc, TRANSIENT_ERRORS):  # the database's own message names its address
            return await _database(request, exc)
        if isinstance(exc, FileWriteError):  # a server-side path: the log has it
            error_id = _logged(request, exc, "file not written")
            return problem_response(request, 500, f"a file of the server could not be written ({exc.reason}); the "
                                                  f"server log has its path under error id {error_id}",
                                    error_id=error_id)
        return problem_response(request, status_of(exc), str(exc))

    for error_type in (*USER_ERRORS, *TRANSIENT_ERRORS):
        app.add_exception_handler(error_type, _user)

    @app.exception_handler(sa.exc.DBAPIError)
    async def _database(request: Request, exc: BaseException):
        error_id = _logged(request, exc, "database error")
        return problem_response(request, 503, f"database error: {database_failure(exc)}; the server log has the "
                                              f"details under error id {error_id}", error_id=error_id)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception):
        error_id = uuid.uuid4().hex[:12]
        log.error("internal error %s on %s %s", error_id, request.method, request.url.path, exc_info=exc)
        return problem_response(request, 500, f"internal error ({type(exc).__name__}); the server log has the "
                                              f"details under error id {error_id}", error_id=error_id)


def check_content_length(request, limit: int, limit_text: str) -> None:
    """411 without a ``Content-Length`` (no chunked uploads), 413 above ``limit`` bytes (``limit_text`` says it)."""
    raw = request.headers.get("content-length")
    if raw is None:
        raise HTTPProblem(411, "send the upload with a Content-Length (chunked uploads are not accepted)",
                          title="Length required")
    if not raw.isdigit() or int(raw) > limit:
        raise HTTPProblem(413, f"the upload is {raw} bytes; the limit {limit_text}")
