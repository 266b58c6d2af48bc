"""Where an answer collection asked over the HTTP API may connect, checked at the connection itself: the host is
resolved once and only checked addresses are connected to (docs/http-api.md, docs/failure-behaviour.md)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpcore
import httpx

from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.settings import get_settings

_DEFAULT_PORTS = {"http": 80, "https": 443}
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class EndpointRefusedError(BadInputError, ValueError):
    """The endpoint is not one the operator allowed the HTTP API to call (the message says which setting)."""


@dataclass(frozen=True)
class _Base:
    scheme: str
    host: str
    port: int
    path: str

    def holds(self, scheme: str, host: str, port: int, path: str) -> bool:
        if (scheme, host, port) != (self.scheme, self.host, self.port):
            return False
        base = self.path.rstrip("/")
        return not base or path == base or path.startswith(base + "/")


def _parts(url: str) -> tuple[str, str, int, str]:
    """``(scheme, host, port, path)`` as httpx connects to them (host lower-cased, IDNA-encoded, no brackets)."""
    parsed = httpx.URL(url)
    scheme = parsed.scheme.lower()
    return scheme, parsed.host.lower(), parsed.port or _DEFAULT_PORTS.get(scheme, 0), parsed.path or "/"


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Globally routable (an IPv6 address carrying an IPv4 one: both judged)."""
    if isinstance(address, ipaddress.IPv6Address):
        carried = [address.ipv4_mapped, address.sixtofour, *(address.teredo or ())]
        if address in _NAT64:
            carried.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if any(c is not None and not _public(c) for c in carried):
            return False
    return address.is_global and not (address.is_private or address.is_loopback or address.is_link_local
                                      or address.is_reserved or address.is_multicast or address.is_unspecified)


def _kind(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """What kind of non-public address ``address`` is, e.g. ``"a loopback address"``."""
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    inner = mapped or address
    kind = next((flag.replace("_", "-") for flag in ("unspecified", "loopback", "link_local", "multicast", "private",
                                                      "reserved") if getattr(inner, f"is_{flag}")), "non-public")
    return f"an IPv4-mapped {kind} address" if mapped else f"a {kind} address"


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


class EndpointGuard:
    """The endpoints the HTTP API may call: ``bases`` and, when ``public``, hosts with public addresses only."""

    def __init__(self, bases: Iterable[str] = (), *, public: bool = False):
        self.bases = tuple(_Base(*_parts(b)) for b in bases)
        self.public = public

    @classmethod
    def from_settings(cls) -> EndpointGuard:
        settings = get_settings()
        bases = [b.strip() for b in (settings.collect_endpoints or "").split(",") if b.strip()]
        return cls(bases, public=settings.collect_public_endpoints)

    def check_url(self, url: str) -> None:
        """Refuse a URL neither under a listed base nor, with ``public``, http(s) (addresses checked later)."""
        try:
            split = urlsplit(url)
        except ValueError:
            raise EndpointRefusedError("endpoint.url is not a URL the API can call") from None
        if "{" in split.scheme + split.netloc:
            raise EndpointRefusedError("endpoint.url: over the API the placeholders {question} {case_id} {k} may stand "
                                  "only in the path or the query, not in the scheme or host")
        try:
            scheme, host, port, path = _parts(url)
        except (httpx.InvalidURL, ValueError):
            raise EndpointRefusedError("endpoint.url is not a URL the API can call") from None
        if scheme not in _DEFAULT_PORTS or not host:
            raise EndpointRefusedError("endpoint.url: expected an http:// or https:// URL with a host")
        if any(b.holds(scheme, host, port, path) for b in self.bases):
            return
        if not self.public:
            raise EndpointRefusedError(
                "endpoint.url is not an endpoint the operator allowed the API to call: the server's "
                "RAG_COLLECT_ENDPOINTS lists those (base URLs), RAG_COLLECT_PUBLIC_ENDPOINTS=1 allows public "
                "addresses; `rag-pipeline answers collect` calls any endpoint")

    async def precheck(self, url: str) -> None:
        """:meth:`check_url`, then an unlisted endpoint's addresses now, so a refusal comes before any work."""
        self.check_url(url)
        scheme, host, port, path = _parts(url)
        if not any(b.holds(scheme, host, port, path) for b in self.bases):
            with contextlib.suppress(httpcore.ConnectError):  # a name that does not resolve: the case's error
                await self.addresses(host, port)

    def listed(self, host: str, port: int) -> bool:
        """Whether ``host:port`` is the origin of a listed base (connected to at whatever address it has)."""
        host = host.lower().strip("[]")
        return any((b.host, b.port) == (host, port) for b in self.bases)

    async def addresses(self, host: str, port: int) -> list[str]:
        """The addresses of ``host`` (resolved once), all public, else :class:`EndpointRefusedError`."""
        if not self.public:
            raise EndpointRefusedError(f"{host}:{port} is not an endpoint the operator allowed the API to call "
                                  "(RAG_COLLECT_ENDPOINTS)")
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from None
        found: list[str] = []
        for *_, sockaddr in infos:
            text = str(sockaddr[0]).split("%", 1)[0]
            address = ipaddress.ip_address(text)
            if not _public(address):  # a name's address is not told: the API is no map of the server's network
                what = f"is {_kind(address)}" if _is_literal(host) else "has an address that is not public"
                raise EndpointRefusedError(f"endpoint.url: {host} {what}; the API calls only public addresses or the "
                                           "endpoints of RAG_COLLECT_ENDPOINTS")
            if text not in found:
                found.append(text)
        if not found:
            raise httpcore.ConnectError(f"cannot resolve {host}: no address")
        return found


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend connecting only to a listed origin or an address the guard checked."""

    def __init__(self, guard: EndpointGuard):
        self.guard = guard
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: typing.Iterable[typing.Any] | None = None) -> httpcore.AsyncNetworkStream:
        if self.guard.listed(host, port):
            return await self.inner.connect_tcp(host, port, timeout=timeout, local_address=local_address,
                                                socket_options=socket_options)
        failure: Exception | None = None
        for address in await self.guard.addresses(host, port):
            try:
                return await self.inner.connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                                    socket_options=socket_options)
            except httpcore.ConnectError as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(self, path: str, timeout: float | None = None,  # noqa: ARG002
                                  socket_options: typing.Iterable[typing.Any] | None = None,  # noqa: ARG002
                                  ) -> httpcore.AsyncNetworkStream:
        raise EndpointRefusedError("the API connects to no Unix socket")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def guarded_transport(guard: EndpointGuard, limits: httpx.Limits) -> httpx.AsyncHTTPTransport:
    """httpx's own transport whose connection pool opens its connections through :class:`GuardedBackend`."""
    transport = httpx.AsyncHTTPTransport(limits=limits, trust_env=False)
    transport._pool = httpcore.AsyncConnectionPool(  # httpx has no network-backend argument
        ssl_context=httpx.create_ssl_context(trust_env=False), max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections, keepalive_expiry=limits.keepalive_expiry,
        network_backend=GuardedBackend(guard))
    return transport


def allowed_variables(patterns: Sequence[str], environ: typing.Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that ``patterns`` (``NAME`` or ``PREFIX*``) name; ``RAG_*`` never."""
    def allowed(name: str) -> bool:
        return any(name == p or (p.endswith("*") and name.startswith(p[:-1])) for p in patterns)

    return {k: v for k, v in environ.items() if not k.upper().startswith("RAG_") and allowed(k)}


def api_environ() -> dict[str, str]:
    """The variables an ``env:NAME`` header value may read over the HTTP API (``RAG_COLLECT_ENV``)."""
    patterns = [p.strip() for p in (get_settings().collect_env or "").split(",") if p.strip()]
    return allowed_variables(patterns, os.environ)
