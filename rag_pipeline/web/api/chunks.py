"""``GET /api/v1/knowledge-bases/{id}/chunks``: the chunk ids a dataset labels, listed or searched."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from rag_pipeline.contracts.catalog import ChunkList
from rag_pipeline.service.labelling import chunks as chunk_search
from rag_pipeline.web.dependencies import Engine
from rag_pipeline.web.request_rules import NAME_RULE

router = APIRouter(tags=["knowledge bases"])


@router.get("/knowledge-bases/{id}/chunks", response_model=ChunkList, summary="List or search chunk ids")
def list_chunks(
    engine: Engine,
    id: Annotated[str, Path(description="A knowledge base's UUID or name.", max_length=200,  # noqa: A002
                            json_schema_extra=NAME_RULE)],
    search: Annotated[str | None, Query(min_length=1, max_length=2000,
                                        description="Text to look for (any language).")] = None,
    document: Annotated[str | None, Query(min_length=1, max_length=1000,
                                          description="Only this document (name or id).")] = None,
    limit: Annotated[int, Query(ge=1, le=chunk_search.MAX_LIMIT, description="At most this many chunks.")] = 20,
):
    """The chunk ids to put in ``relevant_chunk_ids``, with document, ordinal, character span and text; 404 for an
    unknown knowledge base or document."""
    return chunk_search.find_chunks(engine, id, search=search, document=document, limit=limit)
