"""Dependencies shared by the routers: the database engine, the run queue's status, paging parameters."""

from __future__ import annotations

from typing import Annotated

import sqlalchemy as sa
from fastapi import Depends, Query, Request

from rag_pipeline.contracts.runs import QueueInfo
from rag_pipeline.service.queued_runs import queue_status
from rag_pipeline.storage.engine import get_engine

MAX_PAGE = 1000


def engine() -> sa.Engine:
    """The knowledge-base database's engine (created and migrated on first use, then cached)."""
    return get_engine()


Engine = Annotated[sa.Engine, Depends(engine)]


def queue(request: Request) -> QueueInfo:
    """Whether a Dagster daemon picks queued runs up (``app.state.daemon``: the one this server started)."""
    return queue_status(get_engine, request.app.state.daemon)


Queue = Annotated[QueueInfo, Depends(queue)]


class Page:
    """``limit`` / ``offset`` query parameters of a paginated list."""

    def __init__(self, limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Items per page.")] = 50,
                 offset: Annotated[int, Query(ge=0, le=10_000_000, description="Items to skip.")] = 0):
        self.limit = limit
        self.offset = offset


Paging = Annotated[Page, Depends()]
