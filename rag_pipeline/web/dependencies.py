"""Dependencies shared by the routers: the database engine, the app's Dagster launcher, paging parameters."""

from __future__ import annotations

from typing import Annotated

import sqlalchemy as sa
from fastapi import Depends, Query, Request

from rag_pipeline.storage.engine import get_engine
from rag_pipeline.web.launcher import Launcher

MAX_PAGE = 1000


def engine() -> sa.Engine:
    """The knowledge-base database's engine (created and migrated on first use, then cached)."""
    return get_engine()


Engine = Annotated[sa.Engine, Depends(engine)]


def launcher(request: Request) -> Launcher:
    """The app's Dagster launcher (``app.state.launcher``, made in the app's lifespan)."""
    return request.app.state.launcher


DagsterLauncher = Annotated[Launcher, Depends(launcher)]


class Page:
    """``limit`` / ``offset`` query parameters of a paginated list."""

    def __init__(self, limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Items per page.")] = 50,
                 offset: Annotated[int, Query(ge=0, le=10_000_000, description="Items to skip.")] = 0):
        self.limit = limit
        self.offset = offset


Paging = Annotated[Page, Depends()]
