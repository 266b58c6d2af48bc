"""Knowledge bases → datasets: the console's start page, a knowledge base's page and the dataset upload.

An upload is validated exactly like a file (every problem at once, each with its case index, case_id and field;
nothing stored when there is one) and, once stored, opens its dataset's dashboard, where the label check
(docs/design.md §8) is shown with its fixes before anything runs.
"""

from __future__ import annotations

from pathlib import PurePath

from fastapi import APIRouter, Depends, Request, UploadFile
from fastapi.responses import RedirectResponse

from rag_pipeline.contracts.errors import USER_ERRORS
from rag_pipeline.service import catalog, evaluations
from rag_pipeline.service.catalog import printable
from rag_pipeline.service.datasets import MAX_FILE_BYTES, DatasetError, DatasetProblem
from rag_pipeline.web.admin.datasets import dataset_url
from rag_pipeline.web.admin.pages import error_page, render
from rag_pipeline.web.dependencies import DagsterLauncher, Engine
from rag_pipeline.web.security import require_console_user, require_csrf

router = APIRouter(dependencies=[Depends(require_console_user)])
RECENT_RUNS = 15


@router.get("/retrieval-evaluations", name="admin_home")
def home(request: Request, engine: Engine, launcher: DagsterLauncher):
    return render(request, "home.html", {"kbs": catalog.list_knowledge_bases(engine),
                                         "runs": evaluations.list_runs(engine, limit=RECENT_RUNS),
                                         "queue": launcher.queue_status()})


def _kb_page(request: Request, engine, kb: str, *, problems=None, upload_name: str | None = None,
             status_code: int = 200, more: int = 0):
    try:
        info = catalog.describe_knowledge_base(engine, kb)
    except USER_ERRORS as exc:
        return error_page(request, 404, str(exc))
    return render(request, "knowledge_base.html", {
        "kb": info, "datasets": catalog.list_datasets(engine, info.name),
        "runs": evaluations.list_runs(engine, knowledge_base=info.name, limit=RECENT_RUNS),
        "problems": problems, "problems_more": more, "upload_name": upload_name,
        "max_mb": MAX_FILE_BYTES // (1024 * 1024),
        "dataset_url": dataset_url}, status_code=status_code)


@router.get("/retrieval-evaluations/kb/{kb}", name="admin_knowledge_base")
def knowledge_base_page(request: Request, engine: Engine, kb: str):
    return _kb_page(request, engine, kb)


@router.post("/retrieval-evaluations/kb/{kb}/upload", dependencies=[Depends(require_csrf)])
async def upload(request: Request, engine: Engine, kb: str, dataset: UploadFile | None = None):
    """Store an uploaded dataset file; on any problem re-show the page with every problem, nothing stored."""
    filename = PurePath((dataset.filename if dataset else "") or "").name
    if dataset is None or not filename:
        return _kb_page(request, engine, kb, problems=[{"message": "choose a dataset file (.json) to upload"}],
                        status_code=422)
    raw = await dataset.read(MAX_FILE_BYTES + 1)
    source = filename
    try:
        if len(raw) > MAX_FILE_BYTES:
            raise DatasetError(source, [DatasetProblem(f"the file is larger than {MAX_FILE_BYTES // 2**20} MB")])
        stored = catalog.store_uploaded_dataset(engine, kb, raw, source=source,
                                                default_name=PurePath(filename).stem)
    except DatasetError as exc:
        rows = [{"case_index": p.case_index, "case_id": p.case_id and printable(p.case_id),
                 "field": p.field and printable(p.field), "message": printable(p.message)} for p in exc.problems]
        return _kb_page(request, engine, kb, problems=rows, upload_name=printable(filename), status_code=422,
                        more=exc.more)
    except USER_ERRORS as exc:
        return _kb_page(request, engine, kb, problems=[{"message": printable(str(exc))}],
                        upload_name=printable(filename),
                        status_code=422)
    new = "1" if stored.created else "2"
    return RedirectResponse(f"{dataset_url(stored.knowledge_base, stored.name)}?uploaded={new}", status_code=303)
