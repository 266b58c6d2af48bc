"""The admin console ``/admin/retrieval-evaluations`` (docs/design.md §7.1): server-rendered pages."""

from __future__ import annotations

from fastapi import APIRouter

from rag_pipeline.web.admin import agreement, answer_runs, compare, datasets, labelling, overview, runs
from rag_pipeline.web.admin.pages import static_router, templates

router = APIRouter(prefix="/admin", tags=["admin console"], include_in_schema=False)
router.include_router(static_router)
for _module in (overview, datasets, runs, compare, answer_runs, agreement):
    router.include_router(_module.router)
router.include_router(labelling.router)  # questions → pooled candidates → graded → dataset version

__all__ = ["router", "templates"]
