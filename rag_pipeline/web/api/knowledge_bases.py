"""``GET /api/v1/knowledge-bases`` and ``GET /api/v1/knowledge-bases/{id}``: what there is to evaluate."""

from __future__ import annotations

from fastapi import APIRouter, Path

from rag_pipeline.contracts.catalog import KnowledgeBaseInfo, KnowledgeBaseList
from rag_pipeline.service import knowledge_bases
from rag_pipeline.web.dependencies import Engine
from rag_pipeline.web.request_rules import NAME_RULE

router = APIRouter(tags=["knowledge bases"])
KnowledgeBaseId = Path(description="A knowledge base's UUID or name.", max_length=200, json_schema_extra=NAME_RULE)


@router.get("/knowledge-bases", response_model=KnowledgeBaseList, summary="List knowledge bases")
def list_knowledge_bases(engine: Engine):
    """Every knowledge base by name: documents (all and searchable), current and replaced chunks, embeddings per
    model, keyword text mode, the strategies it can run (the default of an evaluation) and its datasets and
    runs counts."""
    return KnowledgeBaseList(knowledge_bases=knowledge_bases.list_knowledge_bases(engine))


@router.get("/knowledge-bases/{id}", response_model=KnowledgeBaseInfo, summary="One knowledge base")
def get_knowledge_base(engine: Engine, id: str = KnowledgeBaseId):  # noqa: A002 - the API's path parameter
    """One knowledge base, as the list shows it; 404 for an unknown name or id."""
    return knowledge_bases.describe_knowledge_base(engine, id)
