"""Who may call the service: the API token, the console's session, cross-site checks (docs/http-api.md)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from rag_pipeline.settings import get_settings
from rag_pipeline.web.problems import HTTPProblem, problem_response

MIN_TOKEN_CHARS = 16
SESSION_COOKIE = "rag_session"
SESSION_MAX_AGE = 12 * 3600
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_PROCESS_SECRET = secrets.token_hex(32)  # sessions without a token only carry the CSRF token; reset on restart

templates = Jinja2Templates(directory=Path(__file__).resolve().parent / "templates")
router = APIRouter(tags=["login"], include_in_schema=False)


class BindRefused(ValueError):  # noqa: N818 - a refusal the user is shown, not a crash
    """``serve`` on a non-loopback address without a usable ``RAG_API_TOKEN``."""


def api_token() -> str | None:
    """The configured token (``RAG_API_TOKEN``) without surrounding white space, None when unset or blank."""
    token = get_settings().api_token
    return (token.get_secret_value().strip() or None) if token else None


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str) -> None:
    """Refuse to serve on a non-loopback address unless a token of at least 16 characters is set."""
    if is_loopback(host):
        return
    token = api_token()
    if not token:
        raise BindRefused(f"refusing to listen on {host}: beyond loopback the service needs RAG_API_TOKEN "
                          f"(at least {MIN_TOKEN_CHARS} characters, e.g. `export RAG_API_TOKEN=$(openssl rand -hex "
                          "24)`); every API call then sends `Authorization: Bearer <token>`")
    if len(token) < MIN_TOKEN_CHARS or sum(not c.isspace() for c in token) < MIN_TOKEN_CHARS:
        raise BindRefused(f"refusing to listen on {host}: RAG_API_TOKEN has {sum(not c.isspace() for c in token)} "
                          f"characters other than white space; use at least {MIN_TOKEN_CHARS}")


def session_secret() -> str:
    """The key that signs session cookies: derived from the token, else random per process."""
    token = api_token()
    if not token:
        return _PROCESS_SECRET
    return hashlib.sha256(b"rag-pipeline session\x00" + token.encode()).hexdigest()


def _token_ok(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


def csrf_token(request: Request) -> str:
    """The session's CSRF token (created on first use); put it in every form as ``csrf_token``."""
    token = request.session.get("csrf")
    if not token:
        token = request.session["csrf"] = secrets.token_urlsafe(32)
    return token


def _csrf_matches(request: Request, given: str | None) -> bool:
    expected = request.session.get("csrf")
    return bool(expected and given and hmac.compare_digest(given.encode(), expected.encode()))


async def require_csrf(request: Request) -> None:
    """Dependency of every state-changing form route: the form field or header must carry the session's token."""
    if request.method not in UNSAFE_METHODS:
        return
    given = request.headers.get(CSRF_HEADER)
    if given is None and request.headers.get("content-type", "").startswith(
            ("application/x-www-form-urlencoded", "multipart/form-data")):
        field = (await request.form()).get(CSRF_FIELD)
        given = field if isinstance(field, str) else None
    if not _csrf_matches(request, given):
        raise HTTPProblem(403, "missing or wrong CSRF token: reload the page and submit the form again")


def logged_in(request: Request) -> bool:
    return bool(request.session.get("user"))


async def require_api_user(request: Request) -> None:
    """Every API route's dependency: with ``RAG_API_TOKEN``, a bearer token or a session (+ CSRF to change)."""
    token = api_token()
    if not token:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and given:
        if _token_ok(given.strip(), token):
            return
        raise HTTPProblem(401, "wrong API token", headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
    if logged_in(request):
        if request.method in UNSAFE_METHODS and not _csrf_matches(request, request.headers.get(CSRF_HEADER)):
            raise HTTPProblem(403, "a console session's state-changing call needs its X-CSRF-Token header")
        return
    raise HTTPProblem(401, "this server requires a token: send `Authorization: Bearer <RAG_API_TOKEN>`",
                      headers={"WWW-Authenticate": "Bearer"})


class LoginRequired(Exception):  # noqa: N818 - a redirect, not a failure
    """Raised by :func:`require_console_user`; answered with a redirect to the login form."""

    def __init__(self, next_path: str):
        super().__init__(next_path)
        self.next_path = next_path


async def require_console_user(request: Request) -> None:
    """Dependency of every console page: with ``RAG_API_TOKEN`` set, a login session (else → ``/admin/login``)."""
    if api_token() and not logged_in(request):
        raise LoginRequired(request.url.path + (f"?{request.url.query}" if request.url.query else ""))


def login_redirect(_request: Request, exc: LoginRequired) -> RedirectResponse:
    from urllib.parse import quote  # noqa: PLC0415

    return RedirectResponse(f"/admin/login?next={quote(exc.next_path, safe='/')}", status_code=303)


def _safe_next(target: str | None) -> str:
    """Only a local path (no scheme, no host, no ``//``): never an open redirect."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/admin/retrieval-evaluations"
    return target


@router.get("/admin/login", response_class=HTMLResponse)
def login_form(request: Request, next: str | None = None, error: str | None = None):  # noqa: A002
    return templates.TemplateResponse(request, "login.html", {
        "csrf_token": csrf_token(request), "next": _safe_next(next), "error": error,
        "token_required": bool(api_token())})


@router.post("/admin/login", dependencies=[Depends(require_csrf)])
def login(request: Request, token: Annotated[str, Form(max_length=1000)] = "",
          next: Annotated[str, Form(max_length=2000)] = ""):  # noqa: A002
    expected = api_token()
    if expected and not _token_ok(token.strip(), expected):
        return templates.TemplateResponse(request, "login.html", {
            "csrf_token": csrf_token(request), "next": _safe_next(next), "error": "wrong token",
            "token_required": True}, status_code=401)
    request.session.clear()
    request.session["user"] = "admin"
    request.session["csrf"] = secrets.token_urlsafe(32)  # a new session, a new CSRF token
    return RedirectResponse(_safe_next(next), status_code=303)


@router.post("/admin/logout", dependencies=[Depends(require_csrf)])
def logout(request: Request):
    request.session.clear()
    return RedirectResponse("/admin/login", status_code=303)


MAX_BODY_BYTES = 51 * 1024 * 1024
"""Largest request body (a 50 MB dataset plus multipart overhead); the upload route checks the dataset itself."""


class CrossSiteGuard:
    """ASGI middleware: a state-changing request that a browser marks as cross-site (``Sec-Fetch-Site``), or
    whose ``Origin`` is not this server, is answered 403 before any route runs; a body over
    :data:`MAX_BODY_BYTES` (by its ``Content-Length``) 413, and a body without a length 411, before it is read."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in UNSAFE_METHODS:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            refusal = _cross_site(headers)
            status = 403
            length = headers.get("content-length")
            if refusal is None and length is None and "chunked" in headers.get("transfer-encoding", ""):
                status, refusal = 411, "send the request with a Content-Length (chunked bodies are not accepted)"
            elif refusal is None and length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
                status, refusal = 413, f"the request body is {length[:30]} bytes; the limit is 50 MB (a dataset)"
            if refusal:
                await problem_response(None, status, refusal)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _cross_site(headers: dict[str, str]) -> str | None:
    if headers.get("sec-fetch-site") == "cross-site":
        return "cross-site request refused (Sec-Fetch-Site: cross-site)"
    origin = headers.get("origin")
    if origin is None:
        return None  # not a browser's cross-origin request (curl, scripts, same-origin GET forms)
    host = headers.get("host", "")
    if origin == "null" or urlsplit(origin).netloc.lower() != host.lower():
        return f"cross-site request refused: Origin {origin[:200]!r} is not this server ({host[:200]})"
    return None
