"""Upload a labelled dataset (checked like a dataset file) and list them, under ``…/retrieval/datasets``."""

from __future__ import annotations

from pathlib import PurePath
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import UploadFile

from rag_pipeline.contracts.agreement import AgreementReport
from rag_pipeline.contracts.catalog import DatasetList, UploadResult
from rag_pipeline.evaluation.datasets.load import MAX_FILE_BYTES
from rag_pipeline.service import datasets, knowledge_bases, stored_datasets
from rag_pipeline.storage.names import printable
from rag_pipeline.web.api.knowledge_bases import KnowledgeBaseId
from rag_pipeline.web.dependencies import Engine
from rag_pipeline.web.problems import HTTPProblem, check_content_length
from rag_pipeline.web.request_rules import DATASET_NAME, DATASET_RULE, VERSION_RULE, check_form_fields

router = APIRouter(tags=["datasets"])
MULTIPART_OVERHEAD = 64 * 1024
_LIMIT_TEXT = f"{MAX_FILE_BYTES // (1024 * 1024)} MB"

_UPLOAD_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {"schema": {"type": "object", "required": ["file"], "additionalProperties": False,
                                           "properties": {
            "file": {"type": "string", "format": "binary", "description": "The dataset JSON file (docs/design.md §2)."},
            "name": {"type": "string", "maxLength": 200, "pattern": DATASET_NAME,
                     "description": "Dataset name (default: the file name's stem; the content's `name` field "
                                    "must agree)."}}}},
        "application/json": {"schema": {"description": "The dataset itself: an array of cases, or an object "
                                                       "with `cases` (the file format, docs/design.md §2).",
                                        "oneOf": [{"type": "array"}, {"type": "object"}]}},
    },
}


async def _read_limited(request: Request) -> bytes:
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > MAX_FILE_BYTES:
            raise HTTPProblem(413, f"the request body is over the dataset limit of {_LIMIT_TEXT}")
    return bytes(body)


@router.post("/knowledge-bases/{id}/retrieval/datasets", response_model=UploadResult, status_code=201,
             summary="Upload a dataset", openapi_extra={"requestBody": _UPLOAD_BODY},
             responses={200: {"model": UploadResult, "description": "This version was stored before."},
                        413: {"description": "Over 50 MB."},
                        415: {"description": "Neither multipart/form-data nor JSON."}})
async def upload_dataset(request: Request, engine: Engine, id: str = KnowledgeBaseId,  # noqa: A002
                         name: Annotated[str | None, Query(max_length=200, json_schema_extra=DATASET_RULE,
                                                           description="Dataset name (JSON "
                                                           "body; multipart: the `name` field).")] = None):
    """Validate and store a dataset version for this knowledge base: 201 (new version) or 200 (the same cases
    were stored before). Invalid → 422 whose `errors` list every problem with `case_index`, `case_id`, `field`
    and the CLI's `line`; nothing is stored."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        check_content_length(request, MAX_FILE_BYTES + MULTIPART_OVERHEAD, f"of a dataset is {_LIMIT_TEXT}")
        form = await request.form(max_files=1, max_fields=5)
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise HTTPProblem(422, "the multipart body has no `file` part holding the dataset")
        check_form_fields(form, {"file", "name"})
        raw = await upload.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise HTTPProblem(413, f"{printable(upload.filename)}: over the dataset limit of {_LIMIT_TEXT}")
        field = form.get("name")
        given = field if isinstance(field, str) and field else name
        filename = upload.filename or "upload.json"
        source, stem = printable(filename), PurePath(filename).stem
    elif content_type.startswith("application/json") or not content_type:
        check_content_length(request, MAX_FILE_BYTES, f"of a dataset is {_LIMIT_TEXT}")
        raw = await _read_limited(request)
        given, source, stem = name, "request body", None
    else:
        raise HTTPProblem(415, f"send the dataset as multipart/form-data (a `file` part) or application/json, "
                               f"not {printable(content_type[:100])}", title="Unsupported media type")
    stored = stored_datasets.store_uploaded_dataset(engine, id, raw, source=source, name=given or None,
                                                    default_name=stem)
    return JSONResponse(stored.model_dump(), status_code=201 if stored.created else 200)


@router.get("/knowledge-bases/{id}/retrieval/datasets", response_model=DatasetList, summary="List datasets")
def list_datasets(engine: Engine, id: str = KnowledgeBaseId):  # noqa: A002
    """The datasets stored for this knowledge base (uploaded, or evaluated from files), by name, each with its
    latest version, how many versions and runs it has."""
    datasets = stored_datasets.list_datasets(engine, id)
    kb = datasets[0].knowledge_base if datasets else knowledge_bases.describe_knowledge_base(engine, id).name
    return DatasetList(knowledge_base=kb, datasets=datasets)


@router.get("/knowledge-bases/{id}/retrieval/datasets/{name}/agreement", response_model=AgreementReport,
            summary="Annotator agreement of a stored dataset")
def dataset_agreement(engine: Engine, id: str = KnowledgeBaseId,  # noqa: A002
                      name: str = Path(max_length=200, json_schema_extra=DATASET_RULE,
                                       description="A dataset stored for the knowledge base."),
                      version: Annotated[str | None, Query(max_length=64, json_schema_extra=VERSION_RULE,
                                                           description="A version hash prefix (default: the "
                                                                       "latest).")] = None):
    """How far the dataset's annotators agree (docs/labelling.md, "Several annotators"; the figures:
    docs/metrics.md, "Agreement"): per pair Cohen's κ (unweighted, linear, quadratic, on relevant or not), raw
    agreement and base rates; Fleiss' κ for three or more; the label rule's counts; the disagreements, open ones
    first. A κ that is undefined is `null` with its `reason`. A dataset without judgments has no pairs."""
    return datasets.stored_agreement(engine, id, name, version)
