"""The dataset dashboard: label check, one-click evaluation, live run status, current metrics, regression gate,
each metric over time, run history, and the answer runs with each answer metric over time
(``/admin/retrieval-evaluations/kb/{kb}/datasets/{dataset}``)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import JSONResponse, RedirectResponse

from rag_pipeline.contracts.errors import USER_ERRORS
from rag_pipeline.contracts.metrics import METRIC_LABELS
from rag_pipeline.contracts.runs import RunSummary
from rag_pipeline.retrieval.strategies import load_registry
from rag_pipeline.service import analysis, datasets, evaluations, history, knowledge_bases
from rag_pipeline.service.analysis import DEFAULT_BASELINE
from rag_pipeline.service.answers import list_answer_runs
from rag_pipeline.service.queued_runs import queue_evaluations
from rag_pipeline.web.admin.answer_data import answer_history
from rag_pipeline.web.admin.charts import history_svg, strategy_colours
from rag_pipeline.web.admin.pages import BASE, TABLE_METRICS, error_page, render
from rag_pipeline.web.dependencies import Engine, Queue
from rag_pipeline.web.security import require_console_user, require_csrf

router = APIRouter(dependencies=[Depends(require_console_user)])
ACTIVE = ("queued", "running")
MAX_LABEL_ROWS = 50
MAX_ANSWER_ROWS = 50
ANSWER_CHARTS = (("exact_match", "EM"), ("f1", "F1"), ("citation_precision", "citation precision"),
                 ("citation_recall", "citation recall"), ("refusal_recall", "refusal recall"),
                 ("false_refusal_rate", "false refusal rate"), ("answer_score", "answer score"),
                 ("coverage", "coverage"))
"""The answer figures charted over time (docs/design.md §12.6): metric or run figure, chart title."""


def dataset_url(kb: str, dataset: str) -> str:
    return f"{BASE}/kb/{quote(kb, safe='')}/datasets/{quote(dataset, safe='')}"


def strategy_choices(engine, kb: str) -> list[dict]:
    """Every registry strategy, ``applicable`` by the one rule (else ``reason``: shown disabled)."""
    info = knowledge_bases.describe_knowledge_base(engine, kb)
    skipped = info.inapplicable_strategies
    return [{"version": v, "description": s.description, "applicable": v not in skipped, "reason": skipped.get(v)}
            for v, s in load_registry().items()]


def _progress(s: RunSummary) -> dict:
    total = s.dataset.case_count or s.case_count or 0
    done = total if s.status == "succeeded" else s.cases_done
    return {"run_id": s.run_id, "strategy_version": s.strategy_version, "status": s.status, "cases_done": done or 0,
            "cases_total": total, "started_at": s.started_at, "finished_at": s.finished_at, "error": s.error}


def _gate(engine, kb: str, dataset: str) -> dict:
    ready = analysis.comparison_ready(engine, dataset)
    if ready is not True:
        return {"ready": False, "reason": ready}
    try:
        result = analysis.compare(engine, dataset, knowledge_base=kb)  # the CLI's `compare`, same numbers
    except USER_ERRORS as exc:
        return {"ready": False, "reason": str(exc)}
    primary = [p for p in result.paired if p.metric == result.gate.metric]
    return {"ready": True, "result": result, "primary": primary, "metric_label": METRIC_LABELS[result.gate.metric]}


@router.get("/retrieval-evaluations/kb/{kb}/datasets/{dataset}", name="admin_dataset")
def dataset_page(request: Request, engine: Engine, queue: Queue, kb: str, dataset: str,
                 uploaded: int = 0, launched: str = ""):
    try:
        kb_name, versions = history.dataset_versions(engine, dataset, kb)
    except USER_ERRORS as exc:
        return error_page(request, 404, str(exc))
    if not versions:
        return error_page(request, 404, f"knowledge base {kb_name!r} has no dataset {dataset!r}; upload it first")
    latest = versions[0]
    labels = datasets.check_stored_dataset(engine, latest.dataset_id)
    summaries = evaluations.run_page(engine, knowledge_base=kb_name, dataset=dataset, limit=200)[1]
    current = sorted((s for s in summaries if s.is_current and s.status == "succeeded"),
                     key=lambda s: (s.strategy_version != DEFAULT_BASELINE, s.strategy_version))
    points = history.metric_history(engine, dataset, kb_name)
    colours = strategy_colours([p.strategy_version for p in points] + [s.strategy_version for s in current])
    charts = [history_svg(points, m, METRIC_LABELS[m], colours) for m in TABLE_METRICS]
    baseline_run = next((s.run_id for s in current if s.strategy_version == DEFAULT_BASELINE), None)
    active = [_progress(s) for s in summaries if s.status in ACTIVE]
    return render(request, "dataset.html", {
        "kb": kb_name, "dataset": dataset, "versions": versions, "latest": latest, "labels": labels,
        "invalid": labels.invalid()[:MAX_LABEL_ROWS], "strategies": strategy_choices(engine, kb_name),
        "runs": summaries, "current": current, "active": active, "gate": _gate(engine, kb_name, dataset),
        "charts": charts, "colours": colours, "baseline": DEFAULT_BASELINE, "baseline_run": baseline_run,
        "queue": queue, "uploaded": uploaded, "launched": launched,
        "headline": evaluations.label_headline(labels, example=False), "url": dataset_url(kb_name, dataset),
        **_answer_section(engine, kb_name, dataset)})


def _answer_section(engine, kb: str, dataset: str) -> dict:
    """The dataset's answer runs (newest first) and each answer figure over time, one line per answerer."""
    found = list_answer_runs(engine, dataset=dataset, knowledge_base=kb, limit=MAX_ANSWER_ROWS)
    points = answer_history(engine, dataset, kb)
    colours = strategy_colours([p.strategy_version for p in points])
    charts = [history_svg(points, m, label, colours, run_url="/admin/answer-runs/",
                          floor=-1.0 if m == "answer_score" else 0.0) for m, label in ANSWER_CHARTS] if points else []
    return {"answer_runs": found.runs, "answer_total": found.total, "answer_charts": charts,
            "answer_colours": colours}


@router.post("/retrieval-evaluations/kb/{kb}/datasets/{dataset}/evaluate", dependencies=[Depends(require_csrf)])
def evaluate(request: Request, engine: Engine, kb: str, dataset: str,
             strategy: Annotated[list[str] | None, Form(max_length=100)] = None):
    try:
        kb_name, versions = history.dataset_versions(engine, dataset, kb)
        if not versions:
            return error_page(request, 404, f"knowledge base {kb_name!r} has no dataset {dataset!r}")
        if not strategy:
            return error_page(request, 422, "choose at least one strategy to evaluate", title="Nothing to run")
        launched = queue_evaluations(engine, kb_name, versions[0].dataset_id, strategy)
    except USER_ERRORS as exc:
        return error_page(request, 422, str(exc), title="Evaluation not started")
    ids = ",".join(r.run_id for r in launched.runs)
    return RedirectResponse(f"{dataset_url(kb_name, dataset)}?launched={quote(ids)}", status_code=303)


@router.get("/retrieval-evaluations/kb/{kb}/datasets/{dataset}/runs.json", name="admin_dataset_runs")
def runs_json(engine: Engine, queue: Queue, kb: str, dataset: str):
    """Live status of the dataset's runs (what the dashboard polls): status and cases done / total per run, and
    the queue's message when no Dagster daemon picks queued runs up."""
    try:
        summaries = evaluations.run_page(engine, knowledge_base=kb, dataset=dataset, limit=50)[1]
    except USER_ERRORS as exc:
        return JSONResponse({"detail": str(exc)}, status_code=404)
    runs = [_progress(s) for s in summaries]
    return {"runs": runs, "active": sum(r["status"] in ACTIVE for r in runs), "queue": queue.model_dump()}
