"""The admin console at ``/admin/retrieval-evaluations`` (seed §7): server-rendered pages over the service layer.

``router`` (prefix ``/admin``) is what :func:`rag_pipeline.web.app.create_app` includes. Every page needs
:func:`rag_pipeline.web.security.require_console_user`; every form carries the CSRF token of
:func:`rag_pipeline.web.security.csrf_token`. Templates live in ``templates/`` (``base.html`` is the layout every
page, including other helpers' pages, extends); CSS, JS and fonts are served by the app from ``static/`` under
``/admin/static/`` — no CDN, no build step, the console works with no internet.
"""

from __future__ import annotations

from fastapi import APIRouter

from rag_pipeline.web.admin.pages import templates
from rag_pipeline.web.admin.static_files import router as _static_router

router = APIRouter(prefix="/admin", tags=["admin console"], include_in_schema=False)
router.include_router(_static_router)

__all__ = ["router", "templates"]
