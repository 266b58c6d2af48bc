"""Shared page plumbing of the console: the Jinja2 environment, the render helper and template filters.

Page modules call :func:`render` with a template name and a context; it adds the request, the CSRF token and
the navigation state every page needs. Filters format numbers, timestamps and durations the same way on every
page.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.templating import Jinja2Templates

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
templates = Jinja2Templates(directory=str(TEMPLATE_DIR))


def _fmt(value: Any, digits: int = 4) -> str:
    """A metric as text: ``0.4321``; ``—`` for a missing value."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _signed(value: Any, digits: int = 4) -> str:
    """A delta as text with its sign: ``+0.0123``."""
    if value is None:
        return "—"
    return f"{value:+.{digits}f}"


def _when(value: Any) -> str:
    """A timestamp as ``2026-11-30 17:08 UTC``."""
    if value is None:
        return "—"
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc)
    return value.strftime("%Y-%m-%d %H:%M UTC")


templates.env.filters["fmt"] = _fmt
templates.env.filters["signed"] = _signed
templates.env.filters["when"] = _when


def csrf_for(request: Request) -> str:
    """The CSRF token forms carry (``web.security.csrf_token``); empty while that module is not there yet."""
    try:
        from rag_pipeline.web.security import csrf_token
    except ImportError:  # pragma: no cover - only while helper "api" has not landed web.security
        return ""
    return csrf_token(request)


def render(request: Request, name: str, context: dict[str, Any] | None = None, status_code: int = 200):
    """Render ``templates/<name>`` with the request, the CSRF token and ``context``."""
    ctx = {"csrf_token": csrf_for(request), **(context or {})}
    return templates.TemplateResponse(request, name, ctx, status_code=status_code)
