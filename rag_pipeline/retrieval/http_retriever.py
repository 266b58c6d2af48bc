"""Asking an ``http`` strategy's retriever for each case's ranking, through the one HTTP client
(:mod:`rag_pipeline.storage.http.client`): a reply that is not a usable ranking is that case's error, an endpoint
that cannot be reached ends the asking (docs/strategies.md "HTTP retrievers")."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from rag_pipeline.retrieval.http_strategy import STAGES, HttpRetriever
from rag_pipeline.retrieval.trace import RetrievalError
from rag_pipeline.storage.files import format_size
from rag_pipeline.storage.http.client import MAX_RESPONSE_BYTES, HttpCaller, Reply, RetryRules
from rag_pipeline.storage.http.request import ResolvedHeaders, fill_template, fill_url, parse_template
from rag_pipeline.storage.http.response_paths import PathNotFound, parse_path
from rag_pipeline.storage.http.scrubbing import redact_url

ERROR_QUOTE_CHARS = 200


@dataclass(frozen=True)
class Question:
    case_id: str
    question: str
    k: int


@dataclass(frozen=True)
class Ranking:
    """One case's reply: ``ids`` best first with their ``scores``; per-stage scores and ranks where the reply has
    them (``stages["vector_scores"]`` …, each as long as ``ids``); or ``error`` (``ids`` empty)."""

    case_id: str
    ids: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    stages: dict[str, list[float | None]] = field(default_factory=dict)
    latency_ms: float | None = None
    attempts: int = 0
    error: str | None = None
    texts: list[str] | None = None
    """The returned chunks' texts (``texts_path``), as long as ``ids``; ``titles`` theirs (``titles_path``)."""
    titles: list[str | None] | None = None


class EndpointDownError(RetrievalError):
    """The retriever could not be reached (or the guard refused it): asking the other cases cannot help."""


class RetrieverClient:
    """``async with RetrieverClient(http) as client: async for ranking in client.rankings(questions)``."""

    def __init__(self, http: HttpRetriever, environ: Mapping[str, str] | None = None, *,
                 max_response_bytes: int = MAX_RESPONSE_BYTES):
        self.http = http
        self.template = parse_template(http.request_template) if http.method != "GET" else None
        self.paths = {"ids": parse_path(http.ids_path), "scores": parse_path(http.scores_path)}
        for stage in STAGES:
            for what in ("scores", "ranks"):
                text = getattr(http, f"{stage}_{what}_path")
                if text is not None:
                    self.paths[f"{stage}_{what}"] = parse_path(text)
        self.text_paths = {key: parse_path(text) for key, text in (("texts", http.texts_path),
                                                                    ("titles", http.titles_path)) if text is not None}
        self.headers = ResolvedHeaders(http.headers, environ, url=http.url)
        rules = RetryRules(http.timeout_s, http.retries, http.backoff_s, http.max_wait_s)
        self.max_response_bytes = max_response_bytes
        self._caller = HttpCaller(rules, concurrency=http.concurrency, max_response_bytes=max_response_bytes,
                                  scrub=self.headers.scrub)

    async def __aenter__(self) -> RetrieverClient:
        await self._caller.__aenter__()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self._caller.__aexit__(*exc_info)

    async def rankings(self, questions: Sequence[Question]) -> AsyncIterator[Ranking]:
        """Each question's :class:`Ranking` as it completes, at most ``concurrency`` asked at once;
        :class:`EndpointDownError` when the endpoint cannot be reached."""
        todo = iter(questions)
        running: set[asyncio.Task[tuple[Ranking, bool]]] = set()

        def start() -> None:
            q = next(todo, None)
            if q is not None:
                running.add(asyncio.create_task(self.ask(q)))

        for _ in range(self.http.concurrency):
            start()
        try:
            while running:
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    running.discard(task)
                    ranking, unreachable = task.result()
                    if unreachable:
                        raise EndpointDownError(f"the retriever at {self.headers.scrub(self._shown_url())} cannot "
                                                f"be reached: {ranking.error}")
                    start()
                    yield ranking
        finally:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    def _shown_url(self) -> str:
        return redact_url(self.http.url)

    async def ask(self, q: Question) -> tuple[Ranking, bool]:
        """``(ranking, unreachable)`` of one question."""
        pool = max(self.http.pool_size, q.k)
        url = fill_url(self.http.url, q.question, q.case_id, q.k, pool)
        headers = self.headers.as_dict()
        content = None
        if self.template is not None:
            body = fill_template(self.template, q.question, q.case_id, q.k, pool)
            content = json.dumps(body, ensure_ascii=False).encode("utf-8")
            headers.setdefault("Content-Type", "application/json")
        outcome = await self._caller.call(self.http.method, url, content=content, headers=headers)
        if outcome.reply is None:
            return Ranking(q.case_id, attempts=outcome.attempts, error=outcome.problem), outcome.unreachable
        reply = outcome.reply
        try:
            ids, scores, stages, document = self._parse(reply)
            texts = (cast(list[str], self._strings(document, "texts", len(ids), nullable=False))
                     if "texts" in self.text_paths else None)
            titles = self._strings(document, "titles", len(ids), nullable=True) if "titles" in self.text_paths else None
        except BadReplyError as exc:
            return Ranking(q.case_id, latency_ms=round(reply.latency_ms, 3), attempts=outcome.attempts,
                           error=self.headers.scrub(str(exc))), False
        return Ranking(q.case_id, ids, scores, stages, round(reply.latency_ms, 3), outcome.attempts,
                       texts=texts, titles=titles), False

    def _strings(self, document: Any, key: str, n: int, *, nullable: bool) -> list[str | None]:
        """The texts (or titles) of the ``n`` ids: strings (titles may be null), without NUL characters."""
        path = self.text_paths[key]
        values = self._list(document, key)
        if len(values) != n:
            raise BadReplyError(f"{path.text}: {len(values)} values for {n} ids")
        for i, v in enumerate(values):
            if not (isinstance(v, str) or v is None and nullable):
                need = "a string or null" if nullable else "a string"
                raise BadReplyError(f"{path.text}[{i}]: expected {need}, got {type(v).__name__}")
            if isinstance(v, str) and "\x00" in v:
                raise BadReplyError(f"{path.text}[{i}]: holds a NUL character")
        return values

    def _parse(self, reply: Reply) -> tuple[list[str], list[float], dict[str, list[float | None]], Any]:
        if not reply.ok:
            quoted = reply.body[:ERROR_QUOTE_CHARS].decode("utf-8", "replace")
            raise BadReplyError(f"HTTP {reply.status}: {quoted!r}")
        if reply.over_limit:
            raise BadReplyError(f"the reply is longer than {format_size(self.max_response_bytes)}; not parsed")
        try:
            document = json.loads(reply.body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadReplyError(f"the reply is not JSON ({exc})") from None
        ids = [_id(value, n) for n, value in enumerate(self._list(document, "ids"))]
        if len(set(ids)) != len(ids):
            raise BadReplyError(f"{self.http.ids_path}: an id is returned twice")
        scores = self._numbers(document, "scores", len(ids), nullable=False)
        stages = {key: self._numbers(document, key, len(ids), nullable=True)
                  for key in self.paths if key not in ("ids", "scores")}
        return ids, [float(s) for s in scores if s is not None], stages, document

    def _list(self, document: Any, key: str) -> list[Any]:
        path = self.paths[key] if key in self.paths else self.text_paths[key]
        try:
            value = path.find(document)
        except PathNotFound as exc:
            raise BadReplyError(f"{path.text}: {exc.where}") from None
        if not isinstance(value, list):
            raise BadReplyError(f"{path.text}: expected a list, got {type(value).__name__}")
        return value

    def _numbers(self, document: Any, key: str, n: int, *, nullable: bool) -> list[float | None]:
        values = self._list(document, key)
        if len(values) != n:
            raise BadReplyError(f"{self.paths[key].text}: {len(values)} values for {n} ids")
        for i, v in enumerate(values):
            ok = v is None and nullable or (isinstance(v, int | float) and not isinstance(v, bool)
                                            and math.isfinite(v))
            if not ok:
                raise BadReplyError(f"{self.paths[key].text}[{i}]: expected a finite number, got {v!r:.40}")
        return [None if v is None else float(v) for v in values]


def rank_all(http: HttpRetriever, questions: Sequence[Question],
             environ: Mapping[str, str] | None = None) -> dict[str, Ranking]:
    """Every question's :class:`Ranking` by case id, asked at once (synchronous callers: labelling's pooling)."""
    async def ask() -> dict[str, Ranking]:
        async with RetrieverClient(http, environ) as client:
            return {r.case_id: r async for r in client.rankings(questions)}

    return asyncio.run(ask())


class BadReplyError(ValueError):
    """A reply that is no usable ranking (the case's error)."""


def _id(value: Any, n: int) -> str:
    """An id as text: a string (not empty) or an integer."""
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise BadReplyError(f"id number {n + 1}: expected a string or an integer, got {value!r:.40}")
