"""Answer run pages (docs/design.md §12.6): a run's cases, sorted and filtered by GET links, and a case."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Query, Request

from rag_pipeline.contracts.answers import ANSWER_METRIC_LABELS, ANSWER_METRIC_NAMES, VERDICTS
from rag_pipeline.contracts.errors import USER_ERRORS, http_status
from rag_pipeline.service.answers import get_answer_run, is_wrong_but_confident
from rag_pipeline.web.admin.answer_data import get_answer_case
from rag_pipeline.web.admin.pages import BASE, error_page, render
from rag_pipeline.web.admin.runs import case_url as retrieval_case_url
from rag_pipeline.web.dependencies import Engine
from rag_pipeline.web.security import require_console_user

router = APIRouter(dependencies=[Depends(require_console_user)])
ANSWER_BASE = "/admin/answer-runs"
METRIC_TITLES = {
    "exact_match": "exact match (SQuAD v2.0 / CMRC 2018)", "f1": "token F1 (SQuAD v2.0 / CMRC 2018)",
    "answer_contains": "a reference occurs in the answer", "key_point_recall": "share of key points in the answer",
    "citation_precision": "cited chunks that are relevant", "citation_recall": "relevant chunks that are cited",
    "citation_validity": "cited chunks the system had retrieved", "sentence_citation_coverage":
    "answer sentences with a citation", "lexical_support": "answer sentences supported by their cited chunks",
    "answer_score": "CRAG-style: +1 correct, 0 refused, -1 wrong"}
"""What each answer metric means, in a column header's title (definitions: docs/design.md §12.3)."""


def answer_run_url(run_id: str, **params) -> str:
    query = urlencode({k: v for k, v in params.items() if v})
    return f"{ANSWER_BASE}/{run_id}" + (f"?{query}" if query else "")


def answer_case_url(run_id: str, case_id: str) -> str:
    return f"{ANSWER_BASE}/{run_id}/cases/{quote(case_id, safe='')}"


def _sort_link(run_id: str, metric: str, sort: str, verdict: str, wbc: int) -> str:
    """The header link of ``metric``: descending first, ascending when it is already sorted descending."""
    return answer_run_url(run_id, verdict=verdict, wbc=wbc, sort=metric if sort == f"-{metric}" else f"-{metric}")


@router.get("/answer-runs/{run_id}", name="admin_answer_run")
def answer_run_page(request: Request, engine: Engine, run_id: str,
                    verdict: Annotated[str, Query(max_length=100)] = "",
                    sort: Annotated[str, Query(max_length=100)] = "", wbc: int = 0):
    """The run's summary and cases: ``verdict`` one verdict only, ``wbc=1`` only the wrong-but-confident cases,
    ``sort`` an answer metric (``-metric`` descending; undefined values last)."""
    try:
        report = get_answer_run(engine, run_id, verdict=verdict or None, sort=sort or None,
                                wrong_but_confident=bool(wbc))
        everything = get_answer_run(engine, run_id).cases if (verdict or wbc) else report.cases
    except USER_ERRORS as exc:
        status = http_status(exc)
        return error_page(request, status, str(exc), title="Not found" if status == 404 else "Bad request")
    run = report.stored_run
    return render(request, "answer_run.html", {
        "run": run, "s": run.summary, "cases": report.cases, "total": len(everything),
        "wbc_count": sum(is_wrong_but_confident(c) for c in everything), "verdict": verdict, "sort": sort,
        "wbc": 1 if wbc else 0, "metrics": ANSWER_METRIC_NAMES, "labels": ANSWER_METRIC_LABELS,
        "titles": METRIC_TITLES, "verdicts": VERDICTS, "is_wbc": is_wrong_but_confident,
        "run_url": lambda **p: answer_run_url(run.run_id, **p), "case_url": answer_case_url,
        "sort_link": lambda m: _sort_link(run.run_id, m, sort, verdict, wbc),
        "dataset_url": _dataset_url(run.knowledge_base, run.dataset)})


@router.get("/answer-runs/{run_id}/cases/{case_id:path}", name="admin_answer_case")
def answer_case_page(request: Request, engine: Engine, run_id: str, case_id: str):
    """One case: question, answer, references, key points, refusal, verdict, every metric, every citation."""
    try:
        detail = get_answer_case(engine, run_id, case_id)
    except USER_ERRORS as exc:
        return error_page(request, http_status(exc), str(exc))
    run = detail.run
    return render(request, "answer_case.html", {
        "d": detail, "run": run, "c": detail.case, "metrics": ANSWER_METRIC_NAMES, "labels": ANSWER_METRIC_LABELS,
        "titles": METRIC_TITLES, "case_url": answer_case_url, "run_url": answer_run_url(run.run_id),
        "is_wbc": is_wrong_but_confident(detail.case), "dataset_url": _dataset_url(run.knowledge_base, run.dataset),
        "retrieval_url": retrieval_case_url(detail.retrieval_run_id, detail.case.case_id)
        if detail.retrieval_run_id else None})


def _dataset_url(kb: str, dataset: str) -> str:
    return f"{BASE}/kb/{quote(kb, safe='')}/datasets/{quote(dataset, safe='')}"
