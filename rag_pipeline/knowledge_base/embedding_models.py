"""The registered embedding models: the shipped ones and those of backend ``endpoint``, kept in ``embedding_models``
(added only by ``rag-pipeline embeddings add-endpoint``; the HTTP API never names a URL the server connects to).

A model's name and what makes its vectors (the server's model id, the dimension) never change once added: the
vectors stored under the name would be mislabelled. Where it is asked (URL, headers, batch size, concurrency,
timeouts) may be changed by adding it again; a running process keeps the definition it loaded."""

from __future__ import annotations

import json

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, ValidationError

from rag_pipeline.contracts.errors import ConflictError
from rag_pipeline.knowledge_base.embedding import (
    EMBEDDING_MODELS,
    SHIPPED_MODELS,
    Embedder,
    EmbeddingError,
    check_model_name,
)
from rag_pipeline.knowledge_base.endpoint_embedding import ENDPOINT_BACKEND, EmbeddingEndpoint, endpoint_embedder
from rag_pipeline.storage import queries
from rag_pipeline.storage.http.scrubbing import redact_url

_LOADED: dict[str, Embedder] = {}
"""The endpoint models this process has resolved, by name."""


class EmbeddingModelConflictError(ConflictError, EmbeddingError):
    """An endpoint model added again with another model id or dimension, or under a shipped model's name."""


class EmbeddingModelInfo(BaseModel):
    """One line of ``rag-pipeline embeddings list``: no header value (only the variables' names)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    kind: str  # "shipped" or "endpoint"
    dimension: int
    backend: str
    model_id: str | None = None
    url: str | None = None
    headers: list[str] = []
    batch_size: int | None = None
    concurrency: int | None = None
    registered: bool = True  # a shipped model is registered when a knowledge base first stores its vectors


def _definition(name: str, raw: object) -> EmbeddingEndpoint:
    try:
        return EmbeddingEndpoint.model_validate(raw if isinstance(raw, dict) else json.loads(str(raw)))
    except (ValidationError, ValueError) as exc:
        raise EmbeddingError(f"embedding model {name!r}: its stored definition is unreadable ({exc})") from None


def _existing(conn: sa.Connection, name: str, dimension: int, endpoint: EmbeddingEndpoint) -> sa.Row | None:
    """Model ``name``'s row, if any; :class:`EmbeddingModelConflictError` when ``endpoint`` may not replace it."""
    check_model_name(name)
    if name in EMBEDDING_MODELS:
        raise EmbeddingModelConflictError(f"{name!r} is a shipped embedding model; give the endpoint model another "
                                          "name")
    row = queries.embedding_model_row(conn, name)
    if row is None:
        return None
    if row.backend != ENDPOINT_BACKEND:
        raise EmbeddingModelConflictError(f"{name!r} is a model of backend {row.backend!r}; give the endpoint model "
                                          "another name")
    old = _definition(name, row.endpoint)
    changed = [f"{what} {was!r} → {now!r}" for what, was, now in (
        ("dimension", row.dimension, dimension), ("model id", old.model_id, endpoint.model_id)) if was != now]
    if changed:
        raise EmbeddingModelConflictError(
            f"embedding model {name!r} exists with another {', '.join(changed)}: the vectors stored under its name "
            "were made by the first; add the new one under a new name")
    return row


def check_endpoint_model(engine: sa.Engine, name: str, dimension: int, endpoint: EmbeddingEndpoint) -> None:
    """Raise what :func:`add_endpoint_model` would refuse, before anything is asked of the endpoint."""
    with engine.connect() as conn:
        _existing(conn, name, dimension, endpoint)


def add_endpoint_model(engine: sa.Engine, name: str, dimension: int, endpoint: EmbeddingEndpoint) -> str:
    """Register (or re-point) endpoint model ``name``; returns ``"added"``, ``"updated"`` or ``"unchanged"``."""
    with engine.begin() as conn:
        queries.lock_model_registry(conn)
        row = _existing(conn, name, dimension, endpoint)
        if row is not None and _definition(name, row.endpoint) == endpoint:
            return "unchanged"
        queries.save_endpoint_model(conn, name, dimension, json.dumps(endpoint.model_dump(), sort_keys=True))
    _LOADED.pop(name, None)  # this process uses the new definition from now on
    return "added" if row is None else "updated"


def resolve_endpoint_model(name: str) -> Embedder:
    """The :class:`~rag_pipeline.knowledge_base.embedding.Embedder` of registered endpoint model ``name`` (in the
    database of ``RAG_DATABASE_URL``; read once per process); :class:`EmbeddingError` naming the known models when
    there is none."""
    loaded = _LOADED.get(name)
    if loaded is not None:
        return loaded
    from rag_pipeline.storage.engine import get_engine  # noqa: PLC0415 - only a name not shipped needs the database

    with get_engine().connect() as conn:
        row = queries.embedding_model_row(conn, name)
        if row is None or row.backend != ENDPOINT_BACKEND:
            endpoints = [r.name for r in queries.embedding_model_rows(conn) if r.backend == ENDPOINT_BACKEND]
            raise EmbeddingError(f"unknown embedding model {name!r}; known: {', '.join(EMBEDDING_MODELS)}"
                                 + (f"; endpoint models: {', '.join(endpoints)}" if endpoints else
                                    "; no endpoint model is registered (rag-pipeline embeddings add-endpoint)"))
    return _LOADED.setdefault(name, endpoint_embedder(name, row.dimension, _definition(name, row.endpoint)))


def list_models(engine: sa.Engine) -> list[EmbeddingModelInfo]:
    """The shipped models, then every endpoint model, by name."""
    with engine.connect() as conn:
        rows = queries.embedding_model_rows(conn)
    registered = {r.name for r in rows}
    out = [EmbeddingModelInfo(name=name, kind="shipped", dimension=SHIPPED_MODELS[name][0],
                              backend=SHIPPED_MODELS[name][1], registered=name in registered)
           for name in EMBEDDING_MODELS]
    for row in rows:
        if row.backend == ENDPOINT_BACKEND:
            definition = _definition(row.name, row.endpoint)
            out.append(EmbeddingModelInfo(
                name=row.name, kind="endpoint", dimension=row.dimension, backend=ENDPOINT_BACKEND,
                model_id=definition.model_id, url=redact_url(definition.url), headers=definition.headers,
                batch_size=definition.batch_size, concurrency=definition.concurrency))
    return out
