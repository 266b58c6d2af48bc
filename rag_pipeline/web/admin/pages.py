"""Shared page plumbing of the console: Jinja2, :func:`render`, filters and the ``static/`` assets."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse
from fastapi.templating import Jinja2Templates

from rag_pipeline.contracts.metrics import METRIC_LABELS, METRIC_NAMES
from rag_pipeline.service.environment import check_cjk_font
from rag_pipeline.settings import get_settings
from rag_pipeline.web.security import api_token, csrf_token

BASE = "/admin/retrieval-evaluations"
"""The console's root path (docs/design.md §7.1)."""
TABLE_METRICS = METRIC_NAMES[:6]
"""The metrics of the console's tables: the four of docs/design.md §5, then hit and MAP (AP@k)."""
TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
STATIC_DIR = Path(__file__).resolve().parent / "static"
_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml",
          ".png": "image/png", ".ico": "image/x-icon"}
templates = Jinja2Templates(directory=str(TEMPLATE_DIR))


def _fmt(value: Any, digits: int = 4) -> str:
    """A metric as text: ``0.4321``; ``—`` for a missing value."""
    if value is None:
        return "—"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _signed(value: Any, digits: int = 4) -> str:
    """A delta as text with its sign: ``+0.0123``."""
    return "—" if value is None else f"{value:+.{digits}f}"


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
        value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%d %H:%M UTC")


def _ms(value: Any) -> str:
    """Milliseconds as ``12.3 ms``."""
    return "—" if value is None else f"{value:.1f} ms"


templates.env.filters.update(fmt=_fmt, signed=_signed, when=_when, fmt_ms=_ms)


FONT_CHECK_TTL_S = 600.0
_font_check: list = []  # [(checked at, notice or None)]
_font_lock = threading.Lock()


def cjk_font_notice() -> str | None:
    """What every page says when this machine has no font with Chinese glyphs (``rag-pipeline doctor``'s check;
    the charts are drawn here, and a browser on this machine lacks the glyphs too); None when one is installed.
    A found font is trusted for :data:`FONT_CHECK_TTL_S` seconds; a missing one is looked for again on every page
    (``fc-list``, tens of milliseconds), so the notice goes with the next page once a font is installed."""
    with _font_lock:
        if _font_check and _font_check[0][1] is None and time.monotonic() - _font_check[0][0] < FONT_CHECK_TTL_S:
            return None
        check = check_cjk_font()
        notice = None if check.status == "OK" else (
            f"CJK font: {check.detail} — in the charts drawn on this server, and in a browser on this machine. "
            f"Fix: {check.fix} (`rag-pipeline doctor` checks it).")
        _font_check[:] = [(time.monotonic(), notice)]
        return notice


def render(request: Request, name: str, context: dict[str, Any] | None = None, status_code: int = 200):
    """Render ``templates/<name>`` with the request, the CSRF token, the CJK font notice and ``context``."""
    ctx = {"csrf_token": csrf_token(request), "show_logout": bool(api_token()), "cjk_notice": cjk_font_notice(),
           "dagster_ui": get_settings().dagster_ui_url.rstrip("/"), **(context or {})}
    return templates.TemplateResponse(request, name, ctx, status_code=status_code)


templates.env.globals.update(METRIC_LABELS=METRIC_LABELS, TABLE_METRICS=TABLE_METRICS, BASE=BASE)


def error_page(request: Request, status_code: int, message: str, title: str = "Not found"):
    """An HTML error page (the console never shows a traceback or a JSON problem to a person)."""
    return render(request, "error.html", {"title": title, "message": message}, status_code=status_code)


static_router = APIRouter()


def static_names() -> list[str]:
    """The asset names the console serves (what ``/admin/static/{name}`` accepts)."""
    return sorted(p.name for p in STATIC_DIR.iterdir() if p.is_file() and p.suffix in _TYPES)


@static_router.get("/static/{name}", name="admin_static")
def admin_static(name: str) -> FileResponse:
    """One asset of the console; 404 for anything that is not a file of ``static/`` with a known type."""
    if name not in static_names():
        raise HTTPException(status_code=404, detail=f"no console asset named {name[:100]!r}")
    path = STATIC_DIR / name
    return FileResponse(path, media_type=_TYPES[path.suffix], headers={"Cache-Control": "max-age=300"})
