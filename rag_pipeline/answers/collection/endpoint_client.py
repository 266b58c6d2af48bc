"""A careful async client of a user's RAG endpoint: one case → one answer line, never an exception; bounded
reply size and time, retries (:mod:`rag_pipeline.storage.http.client`) (docs/answers-collection.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from rag_pipeline.answers.collection.reply_mapping import (
    ERROR_BODY_CHARS,
    CallFacts,
    ReplyPaths,
    error_record,
    raw_text,
    record_from_reply,
)
from rag_pipeline.contracts.answers import DEFAULT_REQUEST_TEMPLATE, AnswerRecord, EndpointConfig
from rag_pipeline.evaluation.datasets.load import EvaluationCase
from rag_pipeline.storage.files import format_size
from rag_pipeline.storage.http.client import MAX_RESPONSE_BYTES, HttpCaller, Reply, RetryRules
from rag_pipeline.storage.http.guard import EndpointGuard
from rag_pipeline.storage.http.request import (
    EndpointConfigError,
    ResolvedHeaders,
    check_url,
    fill_template,
    fill_url,
    parse_template,
)
from rag_pipeline.storage.http.response_paths import parse_path

__all__ = ["MAX_RESPONSE_BYTES", "CaseOutcome", "EndpointClient"]


@dataclass(frozen=True)
class CaseOutcome:
    record: AnswerRecord
    requests: int
    unreachable: bool = False
    """Every attempt failed and the last could not connect: the endpoint is down (the collector stops)."""


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
        rules = RetryRules(config.timeout_s, config.retries, config.backoff_s, config.max_wait_s)
        self._caller = HttpCaller(rules, concurrency=config.concurrency, guard=guard,
                                  max_response_bytes=max_response_bytes, scrub=self.headers.scrub)

    async def __aenter__(self) -> EndpointClient:
        await self._caller.__aenter__()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self._caller.__aexit__(*exc_info)

    async def ask(self, case: EvaluationCase) -> CaseOutcome:
        """The case's answer line after at most ``1 + retries`` requests."""
        url = fill_url(self.url, case.question, case.case_id, case.k)
        headers = self.headers.as_dict()
        content = None
        if self.template is not None:
            filled = fill_template(self.template, case.question, case.case_id, case.k)
            content = json.dumps(filled, ensure_ascii=False).encode("utf-8")
            headers.setdefault("Content-Type", "application/json")
        outcome = await self._caller.call(self.config.method, url, content=content, headers=headers)
        if outcome.reply is None:
            record = error_record(case.case_id, outcome.problem or "no reply", attempts=outcome.attempts)
            return CaseOutcome(record, outcome.attempts, unreachable=outcome.unreachable)
        return CaseOutcome(self._record(case, outcome.reply, outcome.attempts), outcome.attempts)

    def _record(self, case: EvaluationCase, reply: Reply, attempts: int) -> AnswerRecord:
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
