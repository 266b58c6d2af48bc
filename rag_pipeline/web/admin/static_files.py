"""The console's CSS and JS, served by the app itself (``/admin/static/<name>``): no CDN, works offline.

Only files that exist directly in ``static/`` are served (no sub-paths, no ``..``); each response carries a
content type and a short cache lifetime so a reload after an upgrade picks up new assets.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse

STATIC_DIR = Path(__file__).resolve().parent / "static"
_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml",
          ".png": "image/png", ".ico": "image/x-icon"}

router = APIRouter()


def static_names() -> list[str]:
    """The asset names the console serves (what ``/admin/static/{name}`` accepts)."""
    return sorted(p.name for p in STATIC_DIR.iterdir() if p.is_file() and p.suffix in _TYPES)


@router.get("/static/{name}", name="admin_static")
def admin_static(name: str) -> FileResponse:
    """One asset of the console; 404 for anything that is not a file of ``static/`` with a known type."""
    if name not in static_names():
        raise HTTPException(status_code=404, detail=f"no console asset named {name!r}")
    path = STATIC_DIR / name
    return FileResponse(path, media_type=_TYPES[path.suffix], headers={"Cache-Control": "max-age=300"})
