"""A hostile or careless judge against a real chat server on 127.0.0.1: every bad reply is that answer's "not
judged" reason, never an exception that ends the run, and the judge's API key never comes back in any form
(docs/judge.md, docs/failure-behaviour.md)."""

from __future__ import annotations

import json
import math

import pytest

from rag_pipeline.answers.judge.client import MAX_REPLY_BYTES, MAX_RETRY_AFTER_S, JudgeClient
from rag_pipeline.answers.judge.prompts import response_format
from rag_pipeline.answers.judge.scores import judge_case, judge_cases
from rag_pipeline.contracts.judge import JudgeConfig, JudgeItem
from rag_pipeline_tests.answers.judge_server import recorded

C1 = "0b5c7f0e-8d0a-4c7e-9a51-2f4f3c1d9e01"
QUESTION, ANSWER = "How tall is the Eiffel Tower?", "The Eiffel Tower is 330 metres tall."
CHUNKS = {C1: "The Eiffel Tower is 330 metres tall and was completed in 1889."}
KEY = "sk-judge-Key-4242/xyz"
DEEP = 100_000
LONG_INT = "7" * 10_000


def _config(judge, **kw) -> JudgeConfig:
    return JudgeConfig(**{"url": judge.url, "model": "m", "backoff_s": 0.01, "timeout_s": 10, "retries": 1, **kw})


def _chat(content: str) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()


HOSTILE = {
    "a 100,000-deep body": (b'{"choices": [], "x": ' + b"[" * DEEP + b"]" * DEEP + b"}", "nested too deeply"),
    "a 100,000-deep content": (_chat('{"claims": ' + "[" * DEEP + "]" * DEEP + "}"), "nested too deeply"),
    "a 10,000-digit integer in the body": (b'{"choices": [{"message": {"content": ' + LONG_INT.encode() + b"}}]}",
                                           "integer too long"),
    "a 10,000-digit integer in the content": (_chat('{"claims": [], "n": ' + LONG_INT + "}"), "integer too long"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_reply_is_that_answers_reason_and_the_next_answer_is_judged(judge, judge_cache, name):
    raw, problem = HOSTILE[name]
    judge.play("faithfulness", {"status": 200, "raw": raw}, "faithfulness_valid")
    items = [JudgeItem(question=QUESTION, answer=ANSWER, cited_chunk_texts=CHUNKS, ask_refusal=False),
             JudgeItem(question=QUESTION, answer=ANSWER + " It is in Paris.", cited_chunk_texts=CHUNKS,
                       ask_refusal=False)]
    hostile, fine = judge_cases(items, _config(judge, concurrency=1), cache=judge_cache)
    assert hostile.faithfulness is None and problem in hostile.not_judged_reason, hostile.not_judged_reason
    assert hostile.skipped["faithfulness"].startswith("not judged: faithfulness repeat 1: malformed reply")
    assert "set_int_max_str_digits" not in hostile.not_judged_reason and "Traceback" not in hostile.not_judged_reason
    assert fine.faithfulness is not None and fine.judged == 1, "the run goes on"
    assert len(judge_cache) == 1, "only the valid reply is cached"


def test_a_20_mb_reply_is_not_read_past_8_mb(judge, judge_cache):
    size = 20 * 1024 * 1024
    judge.play("faithfulness", {"stream_bytes": size})
    score = judge_case(QUESTION, ANSWER, CHUNKS, config=_config(judge), cache=judge_cache, ask_refusal=False)
    assert score.faithfulness is None and "the reply is longer than 8 MB" in score.not_judged_reason
    assert len(judge.requests) == 1, "a reply too long is not asked again"
    assert MAX_REPLY_BYTES == 8 * 1024 * 1024 and judge.bytes_sent < size, "the judge stopped reading"


@pytest.mark.parametrize(("value", "expected"), [
    ("nan", "backoff"), ("²", "backoff"), ("inf", "backoff"), ("-5", "backoff"), ("1e999", "backoff"),
    ("soon", "backoff"), ("9" * 5000, "capped"), ("3", 3.0)])
def test_a_retry_after_that_is_not_a_number_of_seconds_falls_back_to_the_backoff(judge, judge_cache, value, expected):
    judge.play("faithfulness", {"status": 429, "headers": {"Retry-After": value}, "body": {"error": "slow"}},
                "faithfulness_valid")
    body = {"messages": [{"role": "user", "content": QUESTION}], "response_format": response_format("faithfulness")}
    waits: list[float] = []
    with JudgeClient(_config(judge, backoff_s=0.25), judge_cache, sleep=waits.append) as client:
        content, reason = client.ask(body, 0, str)
    assert (content is not None, reason) == (True, None)
    [wait] = waits
    assert math.isfinite(wait) and 0 <= wait <= MAX_RETRY_AFTER_S
    assert wait == {"backoff": 0.25, "capped": MAX_RETRY_AFTER_S}.get(expected, expected)


def test_a_retry_after_of_nan_with_the_real_sleep_does_not_end_the_run(judge, judge_cache):
    judge.play("faithfulness", {"status": 503, "headers": {"Retry-After": "nan"}, "body": {"error": "busy"}},
                "faithfulness_valid")
    score = judge_case(QUESTION, ANSWER, CHUNKS, config=_config(judge), cache=judge_cache, ask_refusal=False)
    assert score.faithfulness == pytest.approx(2 / 3) and len(judge.requests) == 2


def _echo_forms(value: str) -> list[str]:
    return [value, json.dumps(value, ensure_ascii=True)[1:-1], "".join(f"\\u{ord(c):04x}" for c in value)]


def test_a_judge_echoing_its_api_key_leaves_it_in_no_reason_claim_or_cache_line(judge, judge_cache, tmp_path):
    judge.play("faithfulness", {"status": 401, "raw": b'{"error": {"message": "key {authorization} is unknown"}}'})
    judge.play("refusal", {"status": 400, "raw": b'{"error": "no such key: {authorization-u}"}'})
    refused = judge_case(QUESTION, ANSWER, CHUNKS, config=_config(judge, api_key=KEY), cache=judge_cache)
    assert judge.requests[0]["headers"]["Authorization"] == f"Bearer {KEY}", "the key was sent"
    assert refused.not_judged_reason.startswith("faithfulness repeat 1: HTTP 401: ")
    assert "[secret]" in refused.not_judged_reason and "[secret]" in refused.skipped["refused"]

    claim = {"claims": [{"claim": "The key is {authorization}.", "supported": True, "chunk_id": C1}]}
    valid = recorded("faithfulness_valid")
    valid["body"]["choices"][0]["message"]["content"] = json.dumps(claim)
    judge.play("faithfulness", valid)
    echoed = judge_case(QUESTION, ANSWER + " ", CHUNKS, config=_config(judge, api_key=KEY), cache=judge_cache,
                        ask_refusal=False)
    assert echoed.faithfulness == 1.0 and echoed.claims[0].claim == "The key is [secret]."
    stored = [refused.model_dump_json(), echoed.model_dump_json(), (tmp_path / "judge-cache.jsonl").read_text()]
    leaks = [form for form in _echo_forms(KEY) for text in stored if form in text]
    assert not leaks, leaks


def test_a_judge_url_password_echoed_back_is_scrubbed(judge, judge_cache):
    judge.play("faithfulness", {"status": 403, "raw": b'{"error": "who is {authorization}?"}'})
    url = judge.url.replace("http://", "http://judge:Hunter2-pass@")
    score = judge_case(QUESTION, ANSWER, CHUNKS, config=_config(judge, url=url), cache=judge_cache, ask_refusal=False)
    assert judge.requests[0]["headers"]["Authorization"].startswith("Basic ")
    assert "HTTP 403" in score.not_judged_reason and "[secret]" in score.not_judged_reason
    assert "Hunter2" not in score.model_dump_json() and "anVkZ2U6SHVudGVyMi1wYXNz" not in score.model_dump_json()
