"""Rules every request meets before a route's own code runs (a NUL byte is a 422, a 405 lists every allowed method),
and the name patterns the OpenAPI schema states (docs/http-api.md, "Errors"; docs/design.md §2.4)."""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.routing import iter_route_contexts
from pydantic import AfterValidator
from pydantic.json_schema import JsonDict
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

from rag_pipeline.storage.names import check_name
from rag_pipeline.web.problems import HTTPProblem, ProblemItem, problem_response

NAME = r"^(?![.-])[\w.-]+$"
"""A knowledge base's name (or its UUID): letters of any script, digits, ``.``, ``_``, ``-``, not starting
with ``.`` or ``-`` (the name rule of storage.names)."""
DATASET_NAME = r"^(?![.-])(?!.*\.\.\.)[\w.@-]+$"
"""A dataset's name: as :data:`NAME`, also ``@``, never ``...``."""
STRATEGY_VERSION = NAME
PRINTABLE = r"^[^\x00-\x1f\x7f]+$"
"""Free text of a name-like field (an answerer): no control characters."""
VERSION_PREFIX = r"^[0-9a-fA-F]{4,64}$"
"""A run id or dataset version: a hex hash or a unique prefix of at least 4 hex digits."""

_RULES: list[JsonDict] = [{"pattern": p} for p in (NAME, DATASET_NAME, STRATEGY_VERSION, VERSION_PREFIX, PRINTABLE)]
NAME_RULE, DATASET_RULE, STRATEGY_RULE, VERSION_RULE, TEXT_RULE = _RULES
"""``json_schema_extra`` of a parameter or field: the pattern in the schema only; the server applies the rule itself
(its own messages; a lookup of an unknown name is 404), a filter through :func:`valid_name`."""

BAD_REQUEST: dict[int | str, dict[str, Any]] = {400: {
    "description": "A body that cannot be parsed (malformed JSON or multipart, too many multipart fields).",
    "content": {"application/problem+json": {}}}}


def valid_name(kind: str) -> AfterValidator:
    """A filter parameter that must be a valid ``kind`` name, else 422 (not an empty page)."""
    def check(value: str | None) -> str | None:
        return value if value is None else check_name(kind, value)
    return AfterValidator(check)


def printable_text(value: str | None) -> str | None:
    """A free-text filter without control characters (:data:`PRINTABLE`), else 422."""
    if value is not None and not re.fullmatch(PRINTABLE, value):
        raise ValueError("it must be non-empty text without control characters")
    return value


def check_form_fields(form, allowed: set[str]) -> None:
    """422 naming the fields of a multipart body that the operation does not take."""
    unknown = sorted(set(form.keys()) - allowed)
    if unknown:
        shown = ", ".join(repr(name[:100]) for name in unknown[:5])
        raise HTTPProblem(422, f"the multipart body has fields this operation does not take: {shown} (it takes "
                               f"{', '.join(sorted(allowed))})")


def _nul_item(where: str, name: str) -> ProblemItem:
    return ProblemItem(message=f"{where} parameter `{name}` contains a NUL byte (%00)",
                       line=f"{where}.{name}: contains a NUL byte (%00)", field=name, location=[where, name])


async def reject_nul(request: Request) -> None:
    """App-wide dependency: 422 when a path or query parameter (its name or value) holds a NUL byte."""
    items = [_nul_item("path", name) for name, value in request.path_params.items() if "\x00" in str(value)]
    items += [_nul_item("query", name.replace("\x00", "\\x00")) for name, value in request.query_params.multi_items()
              if "\x00" in name or "\x00" in value]
    if items:
        raise HTTPProblem(422, "invalid request: " + "; ".join(i.message for i in items[:10]), errors=items[:50])


def _allowed_methods(app: FastAPI, path: str) -> list[str]:
    methods: set[str] = set()
    for ctx in iter_route_contexts(app.routes):
        if ctx.methods and ctx.path and compile_path(ctx.path)[0].match(path):
            methods |= set(ctx.methods)
    return sorted(methods)


def install(app: FastAPI) -> None:
    """Register the 405 handler (:func:`method_not_allowed`)."""

    @app.exception_handler(405)
    async def method_not_allowed(request: Request, exc: StarletteHTTPException):
        allowed = _allowed_methods(app, request.url.path) or sorted((exc.headers or {}).get("Allow", "").split(", "))
        return problem_response(request, 405, f"{request.method} is not allowed on this path; it allows "
                                              f"{', '.join(allowed)}", headers={"Allow": ", ".join(allowed)})
