"""When the collector asks again (docs/answers-collection.md; the answer line's ``attempts``, docs/design.md §12.2).

Retried: HTTP 429, every 5xx, a timeout of the whole request, and a connection error (refused, reset, DNS).
Not retried: any other status (a 4xx says the request is wrong: asking again will not help), a reply that is
not JSON or lacks the answer. The wait before retry ``n`` (1-based) is ``backoff * 2**(n-1)``; a
``Retry-After`` header (delay-seconds, or an HTTP date) on a 429 / 503 replaces it. Either is capped at
``max_wait``, so a server asking for an hour cannot stall the collection.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from email.utils import parsedate_to_datetime

import httpx

RETRY_STATUSES = frozenset({429}) | frozenset(range(500, 600))
RETRIED_ERRORS = (TimeoutError, httpx.TransportError)
"""A whole-request timeout (``asyncio.timeout``) and httpx's transport errors (its timeouts included)."""


def retryable_status(status: int) -> bool:
    return status in RETRY_STATUSES


def retry_after_seconds(value: str | None, now: dt.datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` value asks for: ``120`` or ``Wed, 21 Oct 2015 07:28:00 GMT``; ``None`` when
    absent or unreadable (the backoff is used then). A date in the past is 0."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    now = now or dt.datetime.now(dt.UTC)
    return max(0.0, (when - now).total_seconds())


def wait_before_retry(retry: int, backoff: float, max_wait: float, retry_after: str | None = None) -> float:
    """Seconds to wait before retry number ``retry`` (1-based)."""
    asked = retry_after_seconds(retry_after)
    wait = asked if asked is not None else backoff * 2 ** (retry - 1)
    return min(wait, max_wait)


def describe_failure(exc: BaseException, timeout_s: float, scrub: Callable[[str], str]) -> tuple[str, bool]:
    """``(what went wrong, whether it is a failure to connect)`` of a :data:`RETRIED_ERRORS` error; ``scrub``
    removes secrets from the library's message."""
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return f"cannot connect to the endpoint: {type(exc).__name__}: {scrub(str(exc))}", True
    if isinstance(exc, (TimeoutError, httpx.TimeoutException)):
        return f"no complete reply within --timeout {timeout_s:g} s", False
    return f"the connection failed: {type(exc).__name__}: {scrub(str(exc))}", False  # reset, protocol error
