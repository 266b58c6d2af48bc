"""History comparison: two runs (or a strategy vs the baseline) side by side — deltas with CI and p-value,
win/tie/loss, the moved cases, and one case's two candidate lists next to each other."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request

from rag_pipeline.contracts.errors import USER_ERRORS
from rag_pipeline.service import history
from rag_pipeline.service.analysis import ComparisonError
from rag_pipeline.web.admin.pages import BASE, error_page, render
from rag_pipeline.web.dependencies import Engine
from rag_pipeline.web.security import require_console_user

router = APIRouter(dependencies=[Depends(require_console_user)])
MOVED_SHOWN = 40
POOL_SHOWN = 20


def compare_url(a: str, b: str, case: str | None = None) -> str:
    return f"{BASE}/compare?a={quote(a)}&b={quote(b)}" + (f"&case={quote(case, safe='')}#side-by-side" if case else "")


@router.get("/retrieval-evaluations/compare", name="admin_compare")
def compare_page(request: Request, engine: Engine, a: Annotated[str, Query(max_length=64)] = "",
                 b: Annotated[str, Query(max_length=64)] = "", case: Annotated[str, Query(max_length=1000)] = ""):
    if not a or not b:
        return error_page(request, 422, "choose two runs to compare (A and B in a dataset's run history)",
                          title="Nothing to compare")
    try:
        pair = history.compare_runs(engine, a, b, n_resamples=5000)
    except ComparisonError as exc:
        return error_page(request, 422, str(exc), title="Cannot compare")
    except USER_ERRORS as exc:
        return error_page(request, 404, str(exc))
    moved = [c for c in pair.cases if c.delta != 0]
    chosen = case or (moved[0].case_id if moved else (pair.cases[0].case_id if pair.cases else None))
    sides = None
    if chosen:
        try:
            sides = (history.case_detail(engine, pair.a.run_id, chosen),
                     history.case_detail(engine, pair.b.run_id, chosen))
        except history.CaseNotFoundError as exc:
            return error_page(request, 404, str(exc))
    wins = next((p for p in pair.comparison.paired if p.metric == "ndcg_at_k"), None)
    return render(request, "compare.html", {
        "pair": pair, "paired": pair.comparison.paired, "moved": moved[:MOVED_SHOWN], "moved_total": len(moved),
        "primary": wins, "case": chosen, "sides": sides, "pool_shown": POOL_SHOWN, "compare_url": compare_url,
        "swap_url": compare_url(pair.b.run_id, pair.a.run_id, chosen)})
