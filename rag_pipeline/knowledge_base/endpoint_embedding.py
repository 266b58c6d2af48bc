"""An embedding model of backend ``endpoint``: vectors from an OpenAI-compatible ``/v1/embeddings`` endpoint (what
text-embeddings-inference, vLLM, Ollama and llama.cpp's server offer), asked through the one HTTP client
(:mod:`rag_pipeline.storage.http.client`: bounded concurrency, retries honouring ``Retry-After``, a body cap).

Request ``{"model": MODEL_ID, "input": [texts]}``; reply ``{"data": [{"index": i, "embedding": [...]}, ...]}``. A
reply that is not exactly one finite, non-zero vector of the model's dimension per text is an
:class:`~rag_pipeline.knowledge_base.embedding.EmbeddingError` naming the model, the URL's host and the problem,
never a header (their values come from the environment when the model is used and are never stored or shown)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import math
import re
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from rag_pipeline.knowledge_base.embedding import Embedder, EmbeddingError
from rag_pipeline.storage.files import format_size
from rag_pipeline.storage.http.client import MAX_RESPONSE_BYTES, HttpCaller, Outcome, RetryRules
from rag_pipeline.storage.http.request import ENV_PREFIX, EndpointConfigError, ResolvedHeaders
from rag_pipeline.storage.http.scrubbing import query_credential, redact_url

ENDPOINT_BACKEND = "endpoint"
ERROR_QUOTE_CHARS = 200
FLOAT32_MAX = float(np.finfo(np.float32).max)
_T = TypeVar("_T")


class EmbeddingEndpoint(BaseModel):
    """Where and how a model of backend ``endpoint`` is asked (stored as ``embedding_models.endpoint``)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", allow_inf_nan=False)

    url: str
    model_id: str = Field(min_length=1, max_length=200)
    headers: list[str] = Field(default_factory=list)
    batch_size: int = Field(32, ge=1, le=2048)
    concurrency: int = Field(4, ge=1, le=64)
    timeout_s: float = Field(60.0, gt=0, le=3600)
    retries: int = Field(3, ge=0, le=20)
    backoff_s: float = Field(0.5, ge=0, le=600)
    max_wait_s: float = Field(30.0, ge=0, le=3600)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"is {redact_url(value)!r}; expected an http:// or https:// URL with a host")
        if parts.password or parts.username:
            raise ValueError("holds credentials: put them in a header whose value is env:VARIABLE")
        if (name := query_credential(value)) is not None:
            raise ValueError(f"holds a credential in its query string (parameter {name!r}): put it in a header "
                             "whose value is env:VARIABLE")
        if re.search(r"/v1/?$", parts.path) or parts.path in ("", "/"):
            raise ValueError(f"is {value!r}: give the whole URL of the embeddings endpoint, e.g. "
                             f"{value.rstrip('/')}{'' if parts.path.rstrip('/').endswith('/v1') else '/v1'}"
                             "/embeddings")
        return value

    @field_validator("model_id")
    @classmethod
    def _model_id(cls, value: str) -> str:
        if not value.strip() or not value.isprintable():
            raise ValueError("must be the model's name on the server (printable, not blank)")
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: list[str]) -> list[str]:
        for number, spec in enumerate(value, 1):
            name, sep, source = spec.partition(":")
            if not sep or not source.strip().startswith(ENV_PREFIX):  # the value is not echoed: it may be a secret
                raise ValueError(f"number {number} ({name.strip()!r}): a header value must be env:VARIABLE (read "
                                 "from the environment when the model is used; a value is never stored)")
        return value

    def host(self) -> str:
        """``host[:port]`` of the URL: what messages name (never the path's query, never a header)."""
        parts = urlsplit(self.url)
        host = parts.hostname or "?"
        host = f"[{host}]" if ":" in host else host
        return f"{host}:{parts.port}" if parts.port else host

    def resolved_headers(self, name: str) -> ResolvedHeaders:
        """The headers with their ``env:`` values read now (:class:`EmbeddingError` when a variable is unset)."""
        try:
            return ResolvedHeaders(self.headers, url=self.url)
        except EndpointConfigError as exc:
            raise EmbeddingError(f"embedding model {name!r}: {exc}") from None


class EndpointEncoder:
    """``encoder(texts)`` → ``(len(texts), dimension)`` float32: the texts in requests of ``batch_size``, at most
    ``concurrency`` at once; the first failure (in input order) is raised, so a caller stores nothing of the call."""

    def __init__(self, name: str, dimension: int, endpoint: EmbeddingEndpoint):
        self.name, self.dimension, self.endpoint = name, dimension, endpoint
        # a reply of a full batch of this dimension fits, with room for the numbers' longest JSON form
        self.max_response_bytes = max(MAX_RESPONSE_BYTES, endpoint.batch_size * dimension * 28 + 65_536)

    def __call__(self, texts: list[str]) -> np.ndarray:
        return _run_sync(self._encode(texts))

    def _fail(self, problem: str) -> EmbeddingError:
        return EmbeddingError(f"embedding model {self.name!r} at {self.endpoint.host()}: {problem}")

    async def _encode(self, texts: list[str]) -> np.ndarray:
        endpoint = self.endpoint
        headers = endpoint.resolved_headers(self.name)
        sent = {**headers.as_dict(), "Content-Type": "application/json"}
        rules = RetryRules(endpoint.timeout_s, endpoint.retries, endpoint.backoff_s, endpoint.max_wait_s)
        batches = [texts[i:i + endpoint.batch_size] for i in range(0, len(texts), endpoint.batch_size)]
        async with HttpCaller(rules, concurrency=endpoint.concurrency, max_response_bytes=self.max_response_bytes,
                              scrub=headers.scrub) as caller:
            async def ask(batch: list[str]) -> np.ndarray:
                body = json.dumps({"model": endpoint.model_id, "input": batch}, ensure_ascii=False).encode("utf-8")
                outcome = await caller.call("POST", endpoint.url, content=body, headers=sent)
                try:
                    return self._vectors(outcome, len(batch))
                except _BadReplyError as exc:
                    raise self._fail(headers.scrub(str(exc))) from None

            tasks = [asyncio.create_task(ask(batch)) for batch in batches]
            try:
                parts = [await task for task in tasks]
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        return np.concatenate(parts) if parts else np.empty((0, self.dimension), dtype=np.float32)

    def _vectors(self, outcome: Outcome, count: int) -> np.ndarray:
        reply = outcome.reply
        if reply is None:
            raise _BadReplyError(outcome.problem or "no reply")
        if not reply.ok:
            quoted = reply.body[:ERROR_QUOTE_CHARS].decode("utf-8", "replace")
            raise _BadReplyError(f"HTTP {reply.status} after {outcome.attempts} attempt(s): {quoted!r}")
        if reply.over_limit:
            raise _BadReplyError(f"the reply is longer than {format_size(self.max_response_bytes)}; not parsed")
        try:
            document = json.loads(reply.body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _BadReplyError(f"the reply is not JSON ({exc})") from None
        data = document.get("data") if isinstance(document, dict) else None
        if not isinstance(data, list):
            raise _BadReplyError("the reply has no list 'data' (expected the OpenAI embeddings shape: "
                            '{"data": [{"index": 0, "embedding": [...]}, ...]})')
        if len(data) != count:
            raise _BadReplyError(f"{len(data)} embeddings for {count} inputs")
        return np.stack([self._vector(item, i) for i, item in enumerate(_by_index(data))])

    def _vector(self, item: dict[str, Any], i: int) -> np.ndarray:
        values = item.get("embedding")
        if not isinstance(values, list):
            raise _BadReplyError(f"data[{i}].embedding: expected a list of numbers, got {type(values).__name__} "
                            "(a base64 string? the request asks for floats)")
        if len(values) != self.dimension:
            raise _BadReplyError(f"data[{i}].embedding has {len(values)} dimensions; the model is registered with "
                            f"{self.dimension}")
        for j, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise _BadReplyError(f"data[{i}].embedding[{j}]: expected a finite number, got {v!r:.40}")
            if abs(v) > FLOAT32_MAX:
                raise _BadReplyError(f"data[{i}].embedding[{j}]: {v!r:.40} is beyond float32's range")
        vector = np.asarray(values, dtype=np.float32)
        if not np.any(vector):
            raise _BadReplyError(f"data[{i}].embedding is the zero vector (it has no direction)")
        return vector


class _BadReplyError(ValueError):
    """A reply that is not the vectors asked for (raised as the model's :class:`EmbeddingError`)."""


def _by_index(data: Sequence[Any]) -> list[dict[str, Any]]:
    """The items of ``data`` in the order of their ``index`` (0 … n-1, each once); in list order when none has one."""
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise _BadReplyError(f"data[{i}]: expected an object, got {type(item).__name__}")
    if all("index" not in item for item in data):
        return list(data)
    indexes = [item.get("index") for item in data]
    if sorted(i for i in indexes if isinstance(i, int) and not isinstance(i, bool)) != list(range(len(data))):
        raise _BadReplyError(f"the items' 'index' values are not 0 … {len(data) - 1}, each once: {indexes!r:.80}")
    return [item for _, item in sorted(zip(indexes, data, strict=True), key=lambda pair: pair[0])]


def _run_sync(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coroutine`` to its end from synchronous code (on a thread of its own when this one runs a loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rag-embed") as pool:
        return pool.submit(asyncio.run, coroutine).result()


def endpoint_embedder(name: str, dimension: int, endpoint: EmbeddingEndpoint) -> Embedder:
    """The :class:`Embedder` of an endpoint model: ``embed`` hands it ``batch_size × concurrency`` texts at a time."""
    return Embedder(name, dimension, ENDPOINT_BACKEND, EndpointEncoder(name, dimension, endpoint),
                    batch_size=endpoint.batch_size * endpoint.concurrency)
