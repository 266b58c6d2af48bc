"""Labelling in the console: ``suggest`` / ``label`` as pages, saved as a new dataset version."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse

from rag_pipeline.contracts.catalog import StoredVersion
from rag_pipeline.contracts.errors import USER_ERRORS
from rag_pipeline.service import history, knowledge_bases
from rag_pipeline.service.labelling import drafts as label_drafts
from rag_pipeline.service.labelling import fixes as label_fixes
from rag_pipeline.service.labelling.drafts import KEY_GRADES, DraftError, save_draft
from rag_pipeline.web.admin.datasets import dataset_url
from rag_pipeline.web.admin.pages import BASE, error_page, render
from rag_pipeline.web.dependencies import Engine
from rag_pipeline.web.security import require_console_user, require_csrf

router = APIRouter(dependencies=[Depends(require_console_user)])
ERRORS: tuple[type[Exception], ...] = (*USER_ERRORS, DraftError)
_FORM_ERRORS: tuple[type[Exception], ...] = (ValueError, *ERRORS)


def labelling_url(kb: str, draft: str | None = None) -> str:
    url = f"{BASE}/kb/{quote(kb, safe='')}/labelling"
    return url if draft is None else f"{url}/{quote(draft, safe='')}"


def _start_page(request: Request, engine, kb: str, *, error: str | None = None, form: dict | None = None,
                status_code: int = 200):
    info = knowledge_bases.describe_knowledge_base(engine, kb)
    return render(request, "labelling.html", {
        "kb": info.name, "drafts": label_drafts.console_drafts(info.name), "error": error,
        "strategies": info.applicable_strategies, "left_out": info.inapplicable_strategies, "form": form or {},
        "url": labelling_url(info.name),
        "labelling_url": labelling_url}, status_code=status_code)


@router.get("/retrieval-evaluations/kb/{kb}/labelling", name="admin_labelling")
def labelling_page(request: Request, engine: Engine, kb: str):
    try:
        return _start_page(request, engine, kb)
    except ERRORS as exc:
        return error_page(request, 404, str(exc))


@router.post("/retrieval-evaluations/kb/{kb}/labelling", dependencies=[Depends(require_csrf)])
async def create_draft(request: Request, engine: Engine, kb: str):
    form = await request.form()
    name, questions = str(form.get("name") or "").strip(), str(form.get("questions") or "")
    depth, k = str(form.get("depth") or "10"), str(form.get("k") or "10")
    strategies = [str(s) for s in form.getlist("strategy")]
    fields = {"name": name, "questions": questions, "depth": depth, "k": k, "strategies": strategies}
    try:
        depth_n, k_n = int(depth), int(k)
        if not name:
            raise DraftError("give the dataset a name")
        label_drafts.create_console_draft(engine, kb, name, questions, strategies=strategies or None, depth=depth_n,
                                          k=k_n)
    except _FORM_ERRORS as exc:  # also DraftError, a bad number, an invalid name, an unknown strategy
        return _start_page(request, engine, kb, error=str(exc), form=fields, status_code=422)
    return RedirectResponse(labelling_url(kb, name), status_code=303)


@router.post("/retrieval-evaluations/runs/{run_id}/draft-unjudged", dependencies=[Depends(require_csrf)])
def draft_unjudged(request: Request, engine: Engine, run_id: str):
    """A console draft of the run's unjudged top-k chunks (every case of its dataset version kept with its labels),
    saved from the draft page as the dataset's next version."""
    try:
        kb, name = label_drafts.create_console_draft_from_run(engine, run_id)
    except ERRORS as exc:
        return error_page(request, 422, str(exc), title="No draft")
    return RedirectResponse(labelling_url(kb, name), status_code=303)


@router.get("/retrieval-evaluations/kb/{kb}/labelling/{name}", name="admin_labelling_draft")
def draft_page(request: Request, kb: str, name: str, q: int | None = None):
    """One question of a draft (``q``, default: where the labeller stopped) with its pooled candidates."""
    return _draft_page(request, kb, name, q)


def _draft_page(request: Request, kb: str, name: str, q: int | None, error: str | None = None,
                status_code: int = 200):
    try:
        draft = label_drafts.open_console_draft(kb, name)
    except ERRORS as exc:
        return error_page(request, 404, str(exc))
    index = draft.position if q is None else max(0, min(q, len(draft.questions) - 1))
    return render(request, "labelling_draft.html", {
        "kb": draft.knowledge_base, "draft": draft, "name": name, "index": index, "question": draft.questions[index],
        "grades": KEY_GRADES, "url": labelling_url(draft.knowledge_base, name), "progress": draft.progress(),
        "error": error, "start_url": labelling_url(draft.knowledge_base)}, status_code=status_code)


@router.post("/retrieval-evaluations/kb/{kb}/labelling/{name}/q/{index}", dependencies=[Depends(require_csrf)])
async def judge(request: Request, kb: str, name: str, index: int):
    """Record the grades of one question; ``action``: ``next`` (done), ``skip``, ``back`` or ``save`` (stay)."""
    form = await request.form()
    try:
        draft = label_drafts.open_console_draft(kb, name)
    except ERRORS as exc:
        return error_page(request, 404, str(exc))
    if not 0 <= index < len(draft.questions):
        return error_page(request, 404, f"the draft has no question {index}")
    question = draft.questions[index]
    for i, candidate in enumerate(question.candidates):
        raw = str(form.get(f"grade-{i}") or "")
        candidate.grade = int(raw) if raw in {str(g) for g in KEY_GRADES} else None
    action = str(form.get("action") or "save")
    if action == "next":
        question.status = "judged"
    elif action == "skip":
        question.status = "skipped"
    step = {"next": 1, "skip": 1, "back": -1}.get(action, 0)
    draft.position = max(0, min(index + step, len(draft.questions) - 1))
    save_draft(draft, label_drafts.draft_path(draft.knowledge_base, name))
    return RedirectResponse(f"{labelling_url(draft.knowledge_base, name)}?q={draft.position}", status_code=303)


@router.post("/retrieval-evaluations/kb/{kb}/labelling/{name}/save", dependencies=[Depends(require_csrf)])
async def save_dataset(request: Request, engine: Engine, kb: str, name: str):
    """Store the judged questions as a new version of the dataset named in the form (validated, labels checked)."""
    form = await request.form()
    dataset = str(form.get("dataset") or name).strip()
    try:
        draft = label_drafts.open_console_draft(kb, name)
    except ERRORS as exc:
        return error_page(request, 404, str(exc))
    try:
        done = label_drafts.store_draft(engine, draft, dataset)
    except ERRORS as exc:
        return _draft_page(request, kb, name, draft.position, error=str(exc), status_code=422)
    return RedirectResponse(f"{dataset_url(done.knowledge_base, done.dataset)}?uploaded=1",
                            status_code=303)


def _latest_version(engine, kb: str, dataset: str) -> tuple[str, StoredVersion | None]:
    kb_name, versions = history.dataset_versions(engine, dataset, kb)
    return kb_name, versions[0] if versions else None


@router.get("/retrieval-evaluations/kb/{kb}/datasets/{dataset}/fix-labels", name="admin_fix_labels")
def fix_labels_preview(request: Request, engine: Engine, kb: str, dataset: str):
    """What ``rag-pipeline fix-labels`` would change in the dataset's latest version (nothing is written): labels
    re-mapped by document span after a re-chunking, document ids replaced by their only chunk, the rest listed."""
    try:
        kb_name, latest = _latest_version(engine, kb, dataset)
        if latest is None:
            return error_page(request, 404, f"knowledge base {kb_name!r} has no dataset {dataset!r}")
        result = label_fixes.fix_stored_labels(engine, latest.dataset_id, kb_name)
    except ERRORS as exc:
        return error_page(request, 404, str(exc))
    return render(request, "fix_labels.html", {"kb": kb_name, "dataset": dataset, "latest": latest,
                                               "fixes": result.fixes, "url": dataset_url(kb_name, dataset)})


@router.post("/retrieval-evaluations/kb/{kb}/datasets/{dataset}/fix-labels", dependencies=[Depends(require_csrf)])
def fix_labels_apply(request: Request, engine: Engine, kb: str, dataset: str):
    """Apply the unambiguous fixes: a new version of the dataset (its metadata records every change)."""
    try:
        kb_name, latest = _latest_version(engine, kb, dataset)
        if latest is None:
            return error_page(request, 404, f"knowledge base {kb_name!r} has no dataset {dataset!r}")
        result = label_fixes.fix_stored_labels(engine, latest.dataset_id, kb_name, save=True)
    except ERRORS as exc:
        return error_page(request, 422, str(exc), title="Labels not fixed")
    if result.saved is None:
        return error_page(request, 422, "no label could be fixed without a person: nothing was stored",
                          title="Nothing to fix")
    return RedirectResponse(f"{dataset_url(kb_name, dataset)}?uploaded=1", status_code=303)
