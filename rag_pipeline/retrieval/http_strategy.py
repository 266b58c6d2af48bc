"""A strategy of kind ``http``: the ranking comes from a retriever the user runs, asked over HTTP for each case
(docs/strategies.md "HTTP retrievers"). Its identity is what determines the ranking: the URL without credentials,
the method, the request template, the response paths and the pool size; never a header value (those come from the
environment at run time) and never the concurrency, timeouts, retries or where the chunks' texts are (stored in the
knowledge base's chunk catalogue)."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rag_pipeline.storage.http.request import ENV_PREFIX, EndpointConfigError, parse_template
from rag_pipeline.storage.http.response_paths import PathSyntaxError, parse_path
from rag_pipeline.storage.http.scrubbing import query_credential, redact_url

DEFAULT_RETRIEVER_TEMPLATE = '{"question": "{question}", "k": "{pool_size}"}'
STAGES = ("vector", "keyword", "rerank")
PATH_FIELDS = ("ids_path", "scores_path", *(f"{s}_scores_path" for s in STAGES),
               *(f"{s}_ranks_path" for s in STAGES))
TEXT_PATH_FIELDS = ("texts_path", "titles_path")
"""Where the reply holds the returned chunks' texts and titles: stored in the knowledge base's chunk catalogue,
never part of the identity (they do not determine the ranking)."""


class HttpRetriever(BaseModel):
    """Where and how to ask, and where the reply holds the ranked ids (best first) and their scores."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", allow_inf_nan=False)

    url: str
    method: str = "POST"
    request_template: str = DEFAULT_RETRIEVER_TEMPLATE
    ids_path: str
    scores_path: str
    vector_scores_path: str | None = None
    keyword_scores_path: str | None = None
    rerank_scores_path: str | None = None
    vector_ranks_path: str | None = None
    keyword_ranks_path: str | None = None
    rerank_ranks_path: str | None = None
    texts_path: str | None = None
    titles_path: str | None = None
    pool_size: int = Field(100, ge=1, le=10_000)
    headers: list[str] = Field(default_factory=list)
    concurrency: int = Field(4, ge=1, le=256)
    timeout_s: float = Field(30.0, gt=0, le=3600)
    retries: int = Field(3, ge=0, le=20)
    backoff_s: float = Field(0.5, ge=0, le=600)
    max_wait_s: float = Field(30.0, ge=0, le=3600)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"is {redact_url(value)!r}; expected an http:// or https:// URL with a host")
        if parts.password:
            raise ValueError("holds a password: put credentials in a header whose value is env:VARIABLE")
        if (name := query_credential(value)) is not None:
            raise ValueError(f"holds a credential in its query string (parameter {name!r}): put it in a header "
                             "whose value is env:VARIABLE")
        return value

    @field_validator("method")
    @classmethod
    def _method(cls, value: str) -> str:
        if value not in ("GET", "POST"):
            raise ValueError(f"is {value!r}; expected 'GET' or 'POST'")
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: list[str]) -> list[str]:
        for number, spec in enumerate(value, 1):
            name, sep, source = spec.partition(":")
            if not sep or not source.strip().startswith(ENV_PREFIX):  # the value is not echoed: it may be a secret
                raise ValueError(f"number {number} ({name.strip()!r}): a header value must be env:VARIABLE (read "
                                 "from the environment when the strategy runs; a value is never stored)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> HttpRetriever:
        if self.method == "GET" and self.request_template != DEFAULT_RETRIEVER_TEMPLATE:
            raise ValueError("field 'request_template': GET sends no body (put {question} in the URL)")
        try:
            parse_template(self.request_template)
        except EndpointConfigError as exc:
            raise ValueError(f"field 'request_template': {exc}") from None
        if self.titles_path is not None and self.texts_path is None:
            raise ValueError("field 'titles_path': give texts_path too (a title is stored with its text)")
        for name in (*PATH_FIELDS, *TEXT_PATH_FIELDS):
            try:
                text = getattr(self, name)
                if text is not None:
                    parse_path(text, name)
            except PathSyntaxError as exc:
                raise ValueError(f"field '{name}': {exc}") from None
        return self

    def identity(self) -> dict[str, object]:
        """What determines the ranking (hashed into the strategy's ``params_hash``); the URL without credentials.
        Not the texts and titles paths: the same ranking with or without them is the same strategy."""
        paths = {name: getattr(self, name) for name in PATH_FIELDS if getattr(self, name) is not None}
        template = json.loads(self.request_template) if self.method != "GET" else None
        return {"url": redact_url(self.url), "method": self.method, "request_template": template,
                "pool_size": self.pool_size, **paths}
