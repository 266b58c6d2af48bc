"""``GET /healthz``: is the service up, can it reach its database, is a Dagster daemon picking runs up."""

from __future__ import annotations

import logging

import sqlalchemy as sa
from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from rag_pipeline.contracts.runs import QueueInfo
from rag_pipeline.evaluation.queries.knowledge_base import ping
from rag_pipeline.storage.engine import get_engine
from rag_pipeline.storage.urls import mask_secrets
from rag_pipeline.web.dependencies import Queue
from rag_pipeline.web.problems import database_failure

router = APIRouter(tags=["health"])
log = logging.getLogger("rag_pipeline.web")


class Health(BaseModel):
    status: str = Field(description="`ok`, or `degraded` when the database cannot be reached.")
    database: str = Field(description="`ok`, or what went wrong reaching it (never its address: the server "
                                      "log has the details).")
    queue: QueueInfo = Field(description="The queue of evaluation runs: does a Dagster daemon pick them up?")


@router.get("/healthz", response_model=Health, summary="Liveness, database and evaluation queue",
            responses={503: {"model": Health, "description": "The database cannot be reached."}})
def healthz(queue: Queue):
    """Always answers (no token needed, no data disclosed): 200 when the database answers, else 503."""
    try:
        with get_engine().connect() as conn:
            ping(conn)
        database = "ok"
    except (sa.exc.SQLAlchemyError, ValueError, OSError) as exc:
        log.warning("healthz: the database does not answer: %s", mask_secrets(str(exc)[:2000]))
        database = database_failure(exc)
    body = Health(status="ok" if database == "ok" else "degraded", database=database, queue=queue)
    return JSONResponse(body.model_dump(), status_code=200 if database == "ok" else 503)
