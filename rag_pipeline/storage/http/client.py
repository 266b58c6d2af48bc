"""The one outgoing HTTP client: an async pool of bounded concurrency whose :meth:`HttpCaller.call` never raises
for the far side's faults. A reply's size and time are bounded; 429, 5xx, timeouts and connection errors are retried
per :mod:`.retry_policy` (``Retry-After`` honoured); a :class:`.guard.EndpointGuard` limits where it connects."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from rag_pipeline.storage.http.guard import EndpointGuard, EndpointRefusedError, guarded_transport
from rag_pipeline.storage.http.retry_policy import (
    RETRIED_ERRORS,
    describe_failure,
    retryable_status,
    wait_before_retry,
)

if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
    # httpcore 1.x imports sniffio in every lock's set-up; absent (anyio 4.x no longer needs it) each failed import
    # searches sys.path again: most of the client's CPU per request. Marked absent once, the import fails at once.
    sys.modules["sniffio"] = None  # type: ignore[assignment]

MAX_RESPONSE_BYTES = 8 * 1024 * 1024
"""A reply longer than this is not parsed (its start kept)."""


@dataclass(frozen=True)
class RetryRules:
    """How often and how long: ``1 + retries`` requests of at most ``timeout_s`` each, waits of ``backoff_s *
    2**(n-1)`` (or ``Retry-After``) capped at ``max_wait_s``."""

    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 1.0
    max_wait_s: float = 60.0


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    over_limit: bool
    retry_after: str | None
    latency_ms: float

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass(frozen=True)
class Outcome:
    """The last reply after at most ``1 + retries`` requests, or ``problem`` when none came (``unreachable``: the
    last attempt could not connect, or the guard refused the endpoint)."""

    reply: Reply | None
    attempts: int
    problem: str | None = None
    unreachable: bool = False


class HttpCaller:
    """``async with HttpCaller(rules, concurrency=4) as caller: await caller.call("POST", url, ...)``."""

    def __init__(self, rules: RetryRules, *, concurrency: int = 4, guard: EndpointGuard | None = None,
                 max_response_bytes: int = MAX_RESPONSE_BYTES, scrub: Callable[[str], str] = str):
        self.rules, self.concurrency, self.guard = rules, concurrency, guard
        self.max_response_bytes, self.scrub = max_response_bytes, scrub
        self._client: httpx.AsyncClient | None = None

    async def __aenter__(self) -> HttpCaller:
        n = self.concurrency
        limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
        transport = guarded_transport(self.guard, limits) if self.guard is not None else None
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.rules.timeout_s), follow_redirects=False,
                                         trust_env=False, limits=limits, transport=transport)
        return self

    async def __aexit__(self, *exc_info) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def call(self, method: str, url: str, *, content: bytes | None = None,
                   headers: dict[str, str] | None = None) -> Outcome:
        """One logical request: retried while the reply or failure is a retryable one."""
        rules = self.rules
        attempts, cannot_connect, problem = 0, False, "no request made"
        for attempt in range(rules.retries + 1):
            attempts += 1
            try:
                reply = await self._once(method, url, content, headers or {})
            except EndpointRefusedError as exc:  # the guard's: asking again cannot help
                return Outcome(None, attempts, str(exc), unreachable=True)
            except RETRIED_ERRORS as exc:
                problem, cannot_connect = describe_failure(exc, rules.timeout_s, self.scrub)
                retry_after = None
            else:
                if not retryable_status(reply.status) or attempt == rules.retries:
                    return Outcome(reply, attempts)
                retry_after = reply.retry_after
            if attempt < rules.retries:
                await asyncio.sleep(wait_before_retry(attempt + 1, rules.backoff_s, rules.max_wait_s, retry_after))
        return Outcome(None, attempts, f"{problem} (after {attempts} attempts)", unreachable=cannot_connect)

    async def _once(self, method: str, url: str, content: bytes | None, headers: dict[str, str]) -> Reply:
        assert self._client is not None, "use HttpCaller in `async with`"
        start = time.perf_counter()
        async with asyncio.timeout(self.rules.timeout_s):
            async with self._client.stream(method, url, content=content, headers=headers) as resp:
                body, over = bytearray(), False
                async for chunk in resp.aiter_bytes():
                    room = self.max_response_bytes - len(body)
                    body += chunk[:room]
                    if len(chunk) > room:
                        over = True
                        break
                return Reply(resp.status_code, bytes(body), over, resp.headers.get("retry-after"),
                             (time.perf_counter() - start) * 1000)
