"""The dataset's annotator agreement page (``…/datasets/{dataset}/agreement``): the API's report, rendered."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from rag_pipeline.contracts.errors import USER_ERRORS
from rag_pipeline.service import datasets
from rag_pipeline.web.admin.datasets import dataset_url
from rag_pipeline.web.admin.pages import error_page, render
from rag_pipeline.web.dependencies import Engine
from rag_pipeline.web.security import require_console_user

router = APIRouter(dependencies=[Depends(require_console_user)])


@router.get("/retrieval-evaluations/kb/{kb}/datasets/{dataset}/agreement", name="admin_agreement")
def agreement_page(request: Request, engine: Engine, kb: str, dataset: str):
    """Per pair Cohen's κ with the confusion matrix, Fleiss' κ, the label rule and the open disagreements of the
    dataset's latest version (docs/labelling.md, "Several annotators")."""
    try:
        report = datasets.stored_agreement(engine, kb, dataset)
    except USER_ERRORS as exc:
        return error_page(request, 404, str(exc))
    return render(request, "agreement.html", {"kb": report.knowledge_base, "dataset": dataset, "report": report,
                                              "url": dataset_url(report.knowledge_base, dataset)})
