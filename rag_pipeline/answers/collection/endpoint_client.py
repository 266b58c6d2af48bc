"""A careful async client of a user's RAG endpoint: one case → one answer line, never an exception; bounded
reply size and time, retries per :mod:`.retry_policy` (docs/answers-collection.md)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import httpx

from rag_pipeline.answers.collection.endpoint_guard import EndpointGuard, EndpointRefusedError, guarded_transport
from rag_pipeline.answers.collection.endpoint_request import (
    EndpointConfigError,
    ResolvedHeaders,
    check_url,
    fill_template,
    fill_url,
    parse_template,
)
from rag_pipeline.answers.collection.reply_mapping import (
    ERROR_BODY_CHARS,
    CallFacts,
    ReplyPaths,
    error_record,
    raw_text,
    record_from_reply,
)
from rag_pipeline.answers.collection.response_paths import parse_path
from rag_pipeline.answers.collection.retry_policy import (
    RETRIED_ERRORS,
    describe_failure,
    retryable_status,
    wait_before_retry,
)
from rag_pipeline.contracts.answers import DEFAULT_REQUEST_TEMPLATE, AnswerRecord, EndpointConfig
from rag_pipeline.evaluation.datasets.load import EvaluationCase
from rag_pipeline.storage.files import format_size

MAX_RESPONSE_BYTES = 8 * 1024 * 1024
"""A reply longer than this is not parsed (recorded as an error, its start kept)."""


@dataclass(frozen=True)
class CaseOutcome:
    record: AnswerRecord
    requests: int
    unreachable: bool = False
    """Every attempt failed and the last could not connect: the endpoint is down (the collector stops)."""


@dataclass(frozen=True)
class _Reply:
    status: int
    body: bytes
    over_limit: bool
    retry_after: str | None
    latency_ms: float


class EndpointClient:
    """``async with EndpointClient(config) as client: await client.ask(case)``; flags checked at once."""

    def __init__(self, config: EndpointConfig, environ: dict[str, str] | None = None, *,
                 guard: EndpointGuard | None = None, max_response_bytes: int = MAX_RESPONSE_BYTES,
                 quote_replies: bool = True):
        self.config = config
        self.guard, self.max_response_bytes, self.quote_replies = guard, max_response_bytes, quote_replies
        self.url = check_url(config.url)
        if config.method == "GET" and config.request_template != DEFAULT_REQUEST_TEMPLATE:
            raise EndpointConfigError("--request-template is the request body; GET sends none (put {question} in "
                                      "the URL, or use --method POST)")
        self.template = parse_template(config.request_template) if config.method != "GET" else None
        self.paths = ReplyPaths(parse_path(config.answer_path, "--answer-path"),
                                parse_path(config.citations_path, "--citations-path"),
                                parse_path(config.contexts_path, "--contexts-path"))
        self.headers = ResolvedHeaders(config.headers, environ, url=config.url)
        self._client: httpx.AsyncClient | None = None

    async def __aenter__(self) -> EndpointClient:
        n = self.config.concurrency
        limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
        transport = guarded_transport(self.guard, limits) if self.guard is not None else None
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.config.timeout_s), follow_redirects=False,
                                         trust_env=False, limits=limits, transport=transport)
        return self

    async def __aexit__(self, *exc_info) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def ask(self, case: EvaluationCase) -> CaseOutcome:
        """The case's answer line after at most ``1 + retries`` requests."""
        attempts, cannot_connect, problem = 0, False, "no request made"
        for attempt in range(self.config.retries + 1):
            attempts += 1
            try:
                reply = await self._request(case)
            except EndpointRefusedError as exc:  # the guard's: asking again cannot help
                return CaseOutcome(error_record(case.case_id, str(exc), attempts=attempts), attempts,
                                   unreachable=True)
            except RETRIED_ERRORS as exc:
                problem, cannot_connect = describe_failure(exc, self.config.timeout_s, self.headers.scrub)
                wait = self._wait(attempt, None)
            else:
                if not retryable_status(reply.status) or attempt == self.config.retries:
                    return CaseOutcome(self._record(case, reply, attempts), attempts)
                wait = self._wait(attempt, reply.retry_after)
            if attempt < self.config.retries:
                await asyncio.sleep(wait)
        record = error_record(case.case_id, f"{problem} (after {attempts} attempts)", attempts=attempts)
        return CaseOutcome(record, attempts, unreachable=cannot_connect)

    def _wait(self, attempt: int, retry_after: str | None) -> float:
        return wait_before_retry(attempt + 1, self.config.backoff_s, self.config.max_wait_s, retry_after)

    async def _request(self, case: EvaluationCase) -> _Reply:
        assert self._client is not None, "use EndpointClient in `async with`"
        url = fill_url(self.url, case.question, case.case_id, case.k)
        headers = self.headers.as_dict()
        content = None
        if self.template is not None:
            filled = fill_template(self.template, case.question, case.case_id, case.k)
            content = json.dumps(filled, ensure_ascii=False).encode("utf-8")
            headers.setdefault("Content-Type", "application/json")
        start = time.perf_counter()
        async with asyncio.timeout(self.config.timeout_s):
            async with self._client.stream(self.config.method, url, content=content, headers=headers) as resp:
                body, over = bytearray(), False
                async for chunk in resp.aiter_bytes():
                    room = self.max_response_bytes - len(body)
                    body += chunk[:room]
                    if len(chunk) > room:
                        over = True
                        break
                return _Reply(resp.status_code, bytes(body), over, resp.headers.get("retry-after"),
                              (time.perf_counter() - start) * 1000)

    def _record(self, case: EvaluationCase, reply: _Reply, attempts: int) -> AnswerRecord:
        common: CallFacts = {"latency_ms": round(reply.latency_ms, 3), "attempts": attempts}
        scrub = self.headers.scrub if self.quote_replies else _nothing
        raw = raw_text(reply.body, scrub) if self.quote_replies else None
        if not 200 <= reply.status < 300:
            quoted = f": {raw[:ERROR_BODY_CHARS]!r}" if raw is not None else ""
            return error_record(case.case_id, f"HTTP {reply.status}{quoted}", raw=raw, **common)
        if reply.over_limit:
            return error_record(case.case_id, f"the reply is longer than {format_size(self.max_response_bytes)}; it "
                                              "was cut there and not parsed", raw=raw, **common)
        return record_from_reply(case.case_id, reply.body, self.paths, scrub, **common)


def _nothing(_text: str) -> str:
    """The stored form of a reply's text when it is not quoted (over the HTTP API): none."""
    return ""
