"""Which ``Host`` a request may name: the DNS-rebinding guard of ``rag-pipeline serve`` (docs/http-api.md,
"Security"): a 421 unless a loopback name on the server's port, or, with ``RAG_API_TOKEN``, ``RAG_ALLOWED_HOSTS``."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from rag_pipeline.settings import get_settings
from rag_pipeline.web.problems import problem_response
from rag_pipeline.web.security import BindRefused, api_token

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


class HostError(ValueError):
    """A Host value (a request's header, or an entry of ``RAG_ALLOWED_HOSTS``) that is not ``name[:port]``."""


def split_host(value: str) -> tuple[str, int | None]:
    """``(lower-case name without brackets, port or None)`` of ``name``, ``name:port`` or ``[v6]:port``."""
    text = value.strip()
    if not text or any(c in text for c in "/?#@\\ \t") or not text.isascii():
        raise HostError(f"{value[:200]!r} is not a host name with an optional port")
    try:
        parts = urlsplit(f"//{text}")
        name, port = parts.hostname, parts.port
    except ValueError as exc:
        raise HostError(f"{value[:200]!r} is not a host name with an optional port ({exc})") from None
    if not name:
        raise HostError(f"{value[:200]!r} has no host name")
    return name.lower(), port


def allowed_hosts() -> list[tuple[str, int | None]]:
    """The entries of ``RAG_ALLOWED_HOSTS`` (empty when unset)."""
    raw = get_settings().allowed_hosts or ""
    entries = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        try:
            entries.append(split_host(item))
        except HostError as exc:
            raise HostError(f"RAG_ALLOWED_HOSTS: {exc}") from None
    return entries


def check_allowed_hosts() -> None:
    """Refuse to serve with a malformed ``RAG_ALLOWED_HOSTS``, or with one but no ``RAG_API_TOKEN``."""
    try:
        extra = allowed_hosts()
    except HostError as exc:
        raise BindRefused(str(exc)) from None
    if extra and not api_token():
        raise BindRefused("RAG_ALLOWED_HOSTS is set but RAG_API_TOKEN is not: a server answering other names than "
                          "the loopback ones needs a token (without one, any page could reach it by DNS rebinding)")


def refusal(scope: Scope) -> tuple[int, str] | None:
    """``(status, detail)`` when the request's Host is not allowed (see the module docstring), else None."""
    header = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == b"host"), None)
    if header is None:
        return 400, "the request has no Host header"
    try:
        name, port = split_host(header)
    except HostError as exc:
        return 400, f"bad Host header: {exc}"
    server = scope.get("server")
    server_port = server[1] if server and server[1] is not None else None
    port = port if port is not None else _DEFAULT_PORTS.get(scope.get("scheme", "http"), 80)
    if name in LOOPBACK_NAMES and (server_port is None or port == server_port):
        return None
    token = api_token()
    extra = allowed_hosts() if token else []
    if token and not extra:
        return None
    if any(name == entry and entry_port in (None, port) for entry, entry_port in extra):
        return None
    on = f":{server_port}" if server_port is not None else ""
    names = ", ".join([f"{n if ':' not in n else f'[{n}]'}{on}" for n in LOOPBACK_NAMES]
                      + [f"{n}{f':{p}' if p else ''}" for n, p in extra])
    hint = ("add it to RAG_ALLOWED_HOSTS" if token else
            "beyond the loopback names the server needs RAG_API_TOKEN and RAG_ALLOWED_HOSTS")
    return 421, (f"Host {header[:200]!r} is not a name this server answers to ({names}): refused as a possible "
                 f"DNS-rebinding request; {hint}")


class HostGuard:
    """ASGI middleware answering a request whose ``Host`` is not allowed first: 421, or 400 if malformed."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = refusal(scope)
            if refused is not None:
                status, detail = refused
                title = "Misdirected request" if status == 421 else None
                await problem_response(None, status, detail, title=title)(scope, receive, send)
                return
        await self.app(scope, receive, send)
