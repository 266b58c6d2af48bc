"""``GET /api/v1/knowledge-bases/{id}/chunks``: the chunk ids a dataset labels, listed or searched.

The same operation as ``rag-pipeline chunks`` (:func:`rag_pipeline.service.labelling.chunks.find_chunks`): without
``search``, the knowledge base's searchable chunks in document and ordinal order; with it, the chunks containing
the text literally first, then the keyword search (BM25 in the KB's text mode: jieba for Chinese) and a vector
search fused by reciprocal rank. ``document`` narrows to one document (original name or id).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from rag_pipeline.service.labelling import chunks as chunk_search
from rag_pipeline.web.dependencies import Engine

router = APIRouter(tags=["knowledge bases"])


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FoundChunk(_Strict):
    """One chunk: its id (what ``relevant_chunk_ids`` holds), document, place and text."""

    rank: int = Field(ge=1, description="1-based place in this listing or search.")
    chunk_id: str = Field(description="document_chunks.id: the value a dataset labels.")
    document_id: str
    document_name: str
    ordinal: int = Field(description="The chunk's position in its document (0-based).")
    char_start: int = Field(description="Character span of the chunk in its document's text.")
    char_end: int
    matched: list[Literal["phrase", "keyword", "vector"]] = Field(
        description="How a search found it: the text literally, the keyword leg, the vector leg.")
    score: float | None = Field(description="Reciprocal-rank fusion score of the search (None: literal match only "
                                            "or no search).")
    snippet: str = Field(description="The text on one line, cut around the searched text.")
    text: str


class ChunkList(_Strict):
    knowledge_base: str
    knowledge_base_id: str
    search: str | None
    document: str | None = Field(description="The document the listing is narrowed to (its original name).")
    total: int = Field(description="Searchable chunks in scope (no search) or chunks found (search).")
    chunks: list[FoundChunk]


@router.get("/knowledge-bases/{id}/chunks", response_model=ChunkList, summary="List or search chunk ids")
def list_chunks(
    engine: Engine,
    id: Annotated[str, Path(description="A knowledge base's UUID or name.", max_length=200)],  # noqa: A002
    search: Annotated[str | None, Query(max_length=2000, description="Text to look for (any language).")] = None,
    document: Annotated[str | None, Query(max_length=1000, description="Only this document (name or id).")] = None,
    limit: Annotated[int, Query(ge=1, le=chunk_search.MAX_LIMIT, description="At most this many chunks.")] = 20,
):
    """The chunk ids to put in ``relevant_chunk_ids``, with document, ordinal, character span and text; 404 for an
    unknown knowledge base or document."""
    return chunk_search.find_chunks(engine, id, search=search, document=document, limit=limit).as_dict()
