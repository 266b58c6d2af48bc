"""When the collector asks again: 429, 5xx, a timeout, a connection error; after ``backoff * 2**(n-1)`` or a valid
``Retry-After``, capped at ``max_wait`` (docs/answers-collection.md)."""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable
from email.utils import parsedate_to_datetime

import httpx

RETRY_STATUSES = frozenset({429}) | frozenset(range(500, 600))
RETRIED_ERRORS = (TimeoutError, httpx.TransportError)
"""A whole-request timeout (``asyncio.timeout``) and httpx's transport errors (its timeouts included)."""
MAX_DELAY_DIGITS = 10
"""A ``Retry-After`` of more digits than this asks for more than 300 years: it is not converted digit by digit."""
_DELAY_SECONDS = re.compile(r"[0-9]+")  # not str.isdigit(): '²' and '٣' are digits to Python, not to HTTP


def retryable_status(status: int) -> bool:
    return status in RETRY_STATUSES


def retry_after_seconds(value: str | None, now: dt.datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` value asks for: ``120`` or ``Wed, 21 Oct 2015 07:28:00 GMT``; ``None`` when
    absent or unreadable (the backoff is used then). A date in the past is 0; the result is always finite."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    if _DELAY_SECONDS.fullmatch(value):
        digits = value.lstrip("0") or "0"
        return float(int(digits) if len(digits) <= MAX_DELAY_DIGITS else 10**MAX_DELAY_DIGITS - 1)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    now = now or dt.datetime.now(dt.UTC)
    return max(0.0, (when - now).total_seconds())


def wait_before_retry(retry: int, backoff: float, max_wait: float, retry_after: str | None = None) -> float:
    """Seconds to wait before retry number ``retry`` (1-based)."""
    asked = retry_after_seconds(retry_after)
    wait = asked if asked is not None and math.isfinite(asked) and asked >= 0 else backoff * 2 ** (retry - 1)
    return max(0.0, min(wait, max_wait))


def describe_failure(exc: BaseException, timeout_s: float, scrub: Callable[[str], str]) -> tuple[str, bool]:
    """``(what went wrong, whether it failed to connect)`` of a :data:`RETRIED_ERRORS` error, scrubbed."""
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return f"cannot connect to the endpoint: {type(exc).__name__}: {scrub(str(exc))}", True
    if isinstance(exc, (TimeoutError, httpx.TimeoutException)):
        return f"no complete reply within --timeout {timeout_s:g} s", False
    return f"the connection failed: {type(exc).__name__}: {scrub(str(exc))}", False  # reset, protocol error
