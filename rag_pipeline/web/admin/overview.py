"""Knowledge bases → datasets: the console's start page, a knowledge base's page and the dataset upload
(Post/Redirect/Get: a refused upload's problems are kept in this process, :data:`FAILED_UPLOADS_KEPT`)."""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from pathlib import PurePath
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request, UploadFile
from fastapi.responses import RedirectResponse

from rag_pipeline.contracts.errors import USER_ERRORS
from rag_pipeline.evaluation.datasets.load import MAX_FILE_BYTES
from rag_pipeline.evaluation.datasets.strict_json import DatasetError, DatasetProblem
from rag_pipeline.service import evaluations, knowledge_bases, stored_datasets
from rag_pipeline.storage.names import printable
from rag_pipeline.web.admin.datasets import dataset_url
from rag_pipeline.web.admin.pages import BASE, error_page, render
from rag_pipeline.web.dependencies import Engine, Queue
from rag_pipeline.web.security import require_console_user, require_csrf

router = APIRouter(dependencies=[Depends(require_console_user)])
RECENT_RUNS = 15
FAILED_UPLOADS_KEPT = 64
_failed_uploads: OrderedDict[str, tuple[str, list[dict], int]] = OrderedDict()  # token → (name, problems, more)
_failed_lock = threading.Lock()


def _refused(kb: str, filename: str | None, problems: list[dict], more: int = 0) -> RedirectResponse:
    """Keep a refused upload's problems under a new token and redirect (303) to the page that shows them."""
    token = secrets.token_urlsafe(12)
    with _failed_lock:
        _failed_uploads[token] = (printable(filename or ""), problems, more)
        while len(_failed_uploads) > FAILED_UPLOADS_KEPT:
            _failed_uploads.popitem(last=False)
    return RedirectResponse(f"{BASE}/kb/{quote(kb, safe='')}?upload_failed={token}", status_code=303)


@router.get("/retrieval-evaluations", name="admin_home")
def home(request: Request, engine: Engine, queue: Queue):
    return render(request, "home.html", {"kbs": knowledge_bases.list_knowledge_bases(engine),
                                         "runs": evaluations.run_page(engine, limit=RECENT_RUNS)[1],
                                         "queue": queue})


def _kb_page(request: Request, engine, kb: str, *, problems=None, upload_name: str | None = None,
             status_code: int = 200, more: int = 0):
    try:
        info = knowledge_bases.describe_knowledge_base(engine, kb)
    except USER_ERRORS as exc:
        return error_page(request, 404, str(exc))
    return render(request, "knowledge_base.html", {
        "kb": info, "datasets": stored_datasets.list_datasets(engine, info.name),
        "runs": evaluations.run_page(engine, knowledge_base=info.name, limit=RECENT_RUNS)[1],
        "problems": problems, "problems_more": more, "upload_name": upload_name,
        "max_mb": MAX_FILE_BYTES // (1024 * 1024),
        "dataset_url": dataset_url}, status_code=status_code)


@router.get("/retrieval-evaluations/kb/{kb}", name="admin_knowledge_base")
def knowledge_base_page(request: Request, engine: Engine, kb: str,
                        upload_failed: Annotated[str, Query(max_length=64)] = ""):
    if not upload_failed:
        return _kb_page(request, engine, kb)
    with _failed_lock:
        name, problems, more = _failed_uploads.get(upload_failed, (None, None, 0))
    if problems is None:  # the server restarted, or many uploads failed since
        problems = [{"message": "the problems of that upload are no longer kept: upload the file again"}]
    return _kb_page(request, engine, kb, problems=problems, upload_name=name, more=more)


@router.post("/retrieval-evaluations/kb/{kb}/upload", dependencies=[Depends(require_csrf)])
async def upload(engine: Engine, kb: str, dataset: UploadFile | None = None):
    """Store an uploaded dataset file; on any problem redirect to the page showing every problem, nothing
    stored."""
    filename = PurePath((dataset.filename if dataset else "") or "").name
    if dataset is None or not filename:
        return _refused(kb, None, [{"message": "choose a dataset file (.json) to upload"}])
    raw = await dataset.read(MAX_FILE_BYTES + 1)
    source = filename
    try:
        if len(raw) > MAX_FILE_BYTES:
            raise DatasetError(source, [DatasetProblem(f"the file is larger than {MAX_FILE_BYTES // 2**20} MB")])
        stored = stored_datasets.store_uploaded_dataset(engine, kb, raw, source=source,
                                                        default_name=PurePath(filename).stem)
    except DatasetError as exc:
        rows = [{"case_index": p.case_index, "case_id": p.case_id and printable(p.case_id),
                 "field": p.field and printable(p.field), "message": printable(p.message)} for p in exc.problems]
        return _refused(kb, filename, rows, more=exc.more)
    except USER_ERRORS as exc:
        return _refused(kb, filename, [{"message": printable(str(exc))}])
    new = "1" if stored.created else "2"
    return RedirectResponse(f"{dataset_url(stored.knowledge_base, stored.name)}?uploaded={new}", status_code=303)
