"""Run detail (a sortable per-case table), case drill-down and chunk text on demand."""

from __future__ import annotations

from collections import Counter
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from rag_pipeline.contracts.catalog import ChunkText
from rag_pipeline.contracts.errors import USER_ERRORS
from rag_pipeline.contracts.reports import CaseReport
from rag_pipeline.service import evaluations, history
from rag_pipeline.service.analysis import DEFAULT_BASELINE
from rag_pipeline.web.admin.pages import BASE, error_page, render
from rag_pipeline.web.api.evaluations import no_case_results_yet
from rag_pipeline.web.dependencies import Engine
from rag_pipeline.web.security import require_console_user

router = APIRouter(dependencies=[Depends(require_console_user)])
MAX_ROWS = 3000
"""The most cases a run page holds (a bigger run is filtered on the server, then cut)."""


def case_url(run_id: str, case_id: str) -> str:
    return f"{BASE}/runs/{run_id}/case?case_id={quote(case_id, safe='')}"


def _zero(case: CaseReport) -> bool:
    """nDCG@k 0: nothing relevant found (an unanswerable case has no metric, docs/design.md §12.1)."""
    return case.metrics is not None and case.metrics.ndcg_at_k == 0


def _matches(case: CaseReport, q: str, zero: bool, reason: str) -> bool:
    return ((not q or q in f"{case.case_id} {case.question}".lower())
            and (not zero or _zero(case)) and (not reason or reason in case.reasons))


@router.get("/retrieval-evaluations/runs/{run_id}", name="admin_run")
def run_page(request: Request, engine: Engine, run_id: str, q: Annotated[str, Query(max_length=500)] = "",
             zero: int = 0, reason: Annotated[str, Query(max_length=100)] = ""):
    """The run's cases. Up to :data:`MAX_ROWS` cases the page holds them all and filters in the browser; a bigger
    run is filtered on the server by the same parameters (``q``, ``zero``, ``reason``) and cut to that many rows."""
    try:
        found = history.run_cases(engine, run_id)
    except USER_ERRORS as exc:
        return error_page(request, 404, str(exc))
    summary, cases = found.summary, found.cases
    reasons = Counter(r for c in cases for r in c.reasons)
    zero_count = sum(1 for c in cases if _zero(c))
    total, matching = len(cases), len(cases)
    if total > MAX_ROWS:
        cases = [c for c in cases if _matches(c, q.strip().lower(), bool(zero), reason)]
        matching = len(cases)
        cases = cases[:MAX_ROWS]
    baseline = [r for r in evaluations.run_page(engine, knowledge_base=summary.knowledge_base.id,
                                                dataset=summary.dataset.name, strategy=DEFAULT_BASELINE,
                                                current_only=True, limit=1)[1] if r.run_id != summary.run_id]
    counts = summary.counts
    misses = counts.miss_reasons if counts else None
    return render(request, "run.html", {
        "s": summary, "cases": cases, "reasons": sorted(reasons.items(), key=lambda kv: -kv[1]), "zero": zero_count,
        "total": total, "matching": matching, "baseline": baseline[0] if baseline else None,
        "truncated": total > MAX_ROWS, "headline": counts and counts.first_line,
        "label_integrity": counts and counts.label_integrity, "miss_counts": misses.counts if misses else {},
        "retriever": counts and counts.retriever,
        "case_url": case_url,
        "dataset_url": f"{BASE}/kb/{quote(summary.knowledge_base.name, safe='')}/datasets/"
                       f"{quote(summary.dataset.name, safe='')}"})


@router.get("/retrieval-evaluations/runs/{run_id}/case", name="admin_case")
def case_page(request: Request, engine: Engine, run_id: str,
              case_id: Annotated[str, Query(max_length=1000)]):
    try:
        detail = history.case_detail(engine, run_id, case_id)
    except history.CaseNotFoundError as exc:
        why = no_case_results_yet(evaluations.run_summaries(engine, [run_id])[0])
        return error_page(request, 404, str(exc)) if why is None else \
            error_page(request, 409, why, title="No case results yet")
    except USER_ERRORS as exc:
        return error_page(request, 404, str(exc))
    s = detail.summary
    others = [r for r in evaluations.run_page(engine, knowledge_base=s.knowledge_base.id, dataset=s.dataset.name,
                                              limit=100)[1] if r.status == "succeeded" and r.run_id != s.run_id]
    # the first option (the default) is the baseline's current run: "compare with" means "with the baseline"
    others.sort(key=lambda r: (r.strategy_version != DEFAULT_BASELINE, not r.is_current))
    return render(request, "case.html", {
        "d": detail, "s": s, "c": detail.case, "k": detail.case.k, "others": others, "case_url": case_url,
        "missed": [r for r in detail.relevant if r.reason not in (None, "hit")]})


@router.get("/retrieval-evaluations/chunks/{chunk_id}", name="admin_chunk_text", response_model=ChunkText)
def chunk_text(engine: Engine, chunk_id: str):
    """One chunk's text, looked up live (candidates never store it): what "show text" fetches."""
    found = history.chunk_texts(engine, [chunk_id])
    if not found:
        return JSONResponse({"detail": f"no chunk {chunk_id[:64]!r}"}, status_code=404)
    return next(iter(found.values()))
