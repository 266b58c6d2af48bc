"""The answer judge against a real chat server on 127.0.0.1 playing back recorded replies (docs/judge.md).

A real HTTP exchange: the judge's own client, retries, parsing and cache, nothing of ours replaced.
"""

from __future__ import annotations

import json
import math
import socket
from pathlib import Path

import pytest

from rag_pipeline.answers.judge.client import JudgeCache, JudgeClient, JudgeConfigError
from rag_pipeline.answers.judge.prompts import (
    FAITHFULNESS_SYSTEM_EN,
    FAITHFULNESS_SYSTEM_ZH,
    PROMPT_VERSION,
    REFUSAL_SYSTEM_ZH,
    REPLY_SCHEMAS,
    SYSTEM_PROMPTS,
    question_language,
    response_format,
)
from rag_pipeline.answers.judge.scores import judge_case, judge_cases, judge_summary
from rag_pipeline.contracts.answers import AnswerCaseResult
from rag_pipeline.contracts.judge import JudgeConfig, JudgeItem
from rag_pipeline.settings import judge_cache_file

C1, C2 = "0b5c7f0e-8d0a-4c7e-9a51-2f4f3c1d9e01", "6a1e2d3c-4b5a-4f69-8e7d-1c2b3a4d5e6f"
Z1 = "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a"
QUESTION = "How tall is the Eiffel Tower and when was it finished?"
ANSWER = "The Eiffel Tower is 330 metres tall, was completed in 1889 and is painted gold."
CHUNKS = {C1: "The Eiffel Tower is 330 metres tall and was completed in 1889.",
          C2: "It was designed by Gustave Eiffel's company for the 1889 World's Fair."}
ZH_QUESTION, ZH_ANSWER = "埃菲尔铁塔有多高？", "埃菲尔铁塔高330米，建于1889年，由金子建成。"
ZH_CHUNKS = {Z1: "埃菲尔铁塔高330米，于1889年建成，是巴黎的地标。"}


def _config(judge, **kw) -> JudgeConfig:
    return JudgeConfig(**{"url": judge.url, "model": "qwen2.5-7b-instruct", "backoff_s": 0.01, "timeout_s": 5,
                          **kw})


def _faithfulness(judge, judge_cache, **kw):
    return judge_case(QUESTION, ANSWER, CHUNKS, config=_config(judge, **kw), cache=judge_cache, ask_refusal=False)


def test_a_valid_reply_gives_supported_over_claims_and_the_request_is_temperature_0_json_schema(judge, judge_cache):
    judge.play("faithfulness", "faithfulness_valid")
    score = _faithfulness(judge, judge_cache, api_key="sk-local-test-key")
    assert score.faithfulness == pytest.approx(2 / 3, abs=1e-12)
    assert [c.supported for c in score.claims] == [True, True, False]
    assert (score.asked, score.judged, score.not_judged_reason) == (1, 1, None)
    assert score.refused is None and score.skipped == {"refused": "not asked"}
    (request,) = judge.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-local-test-key"
    body = request["body"]
    assert (body["model"], body["temperature"], body["response_format"]["type"]) == (
        "qwen2.5-7b-instruct", 0, "json_schema")
    assert body["messages"][0] == {"role": "system", "content": FAITHFULNESS_SYSTEM_EN}
    assert C1 in body["messages"][1]["content"] and ANSWER in body["messages"][1]["content"]


def test_the_identity_is_host_model_and_prompt_version_without_credentials(judge, judge_cache):
    judge.play("faithfulness", "faithfulness_valid")
    url = judge.url.replace("http://", "http://alice:s3cret@")
    score = judge_case(QUESTION, ANSWER, CHUNKS, config=_config(judge, url=url), cache=judge_cache, ask_refusal=False)
    assert score.judge.host == judge.url.split("//")[1].split("/")[0]
    assert (score.judge.model, score.judge.prompt_version) == ("qwen2.5-7b-instruct", PROMPT_VERSION)
    assert "s3cret" not in score.model_dump_json() and "alice" not in score.judge.label
    assert judge.requests[0]["headers"]["Authorization"].startswith("Basic ")  # httpx sent the URL's user
    result = AnswerCaseResult.model_validate({
        "case_id": "q1", "question": QUESTION, "answer": ANSWER, "status": "ok", "reference_answers": ["330 m"],
        "answerable": True, "refused": False, "refusal_source": "none", "verdict": "correct", "verdict_reason": "",
        "answer_metrics": {}, "judge": score.model_dump()})
    assert result.judge == score


def test_the_cache_answers_a_rerun_without_a_request(judge, judge_cache, tmp_path):
    judge.play("faithfulness", "faithfulness_valid")
    first = _faithfulness(judge, judge_cache)
    again = _faithfulness(judge, judge_cache)
    reloaded = _faithfulness(judge, JudgeCache(tmp_path / "judge-cache.jsonl"))
    assert len(judge.requests) == 1
    assert first == again == reloaded
    lines = (tmp_path / "judge-cache.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["model"] == "qwen2.5-7b-instruct"
    _faithfulness(judge, judge_cache, model="another-model")
    assert len(judge.requests) == 2, "the model is part of the cache key"


def test_a_torn_last_cache_line_is_skipped(judge, judge_cache, tmp_path):
    judge.play("faithfulness", "faithfulness_valid")
    _faithfulness(judge, judge_cache)
    path = tmp_path / "judge-cache.jsonl"
    path.write_text(path.read_text(encoding="utf-8") + '{"prompt_sha256": "ab', encoding="utf-8")
    assert len(JudgeCache(path)) == 1
    _faithfulness(judge, JudgeCache(path))
    assert len(judge.requests) == 1


def test_a_reply_wrapped_in_prose_and_markdown_fences_is_parsed(judge, judge_cache):
    judge.play("faithfulness", "faithfulness_fenced")
    assert _faithfulness(judge, judge_cache).faithfulness == 0.5


def test_a_reasoning_preamble_with_braces_before_the_object_is_skipped(judge, judge_cache):
    judge.play("faithfulness", "faithfulness_reasoning")
    assert _faithfulness(judge, judge_cache).faithfulness == pytest.approx(2 / 3)


def test_a_malformed_reply_is_not_judged_with_its_reason_and_not_cached(judge, judge_cache):
    judge.play("faithfulness", "faithfulness_malformed")
    score = _faithfulness(judge, judge_cache)
    assert score.faithfulness is None and score.judged == 0 and score.asked == 1
    assert score.skipped["faithfulness"].startswith("not judged: faithfulness repeat 1: malformed reply: ")
    assert "claims" in score.not_judged_reason
    _faithfulness(judge, judge_cache)
    assert len(judge.requests) == 2 and len(judge_cache) == 0


def test_a_claim_naming_a_chunk_that_is_not_cited_is_not_judged(judge, judge_cache):
    judge.play("faithfulness", "faithfulness_unknown_chunk")
    score = _faithfulness(judge, judge_cache)
    assert score.faithfulness is None and "'chunk-7', which the answer does not cite" in score.not_judged_reason


def test_zero_claims_is_none_with_a_reason_never_1_or_nan(judge, judge_cache):
    judge.play("faithfulness", "faithfulness_no_claims")
    score = _faithfulness(judge, judge_cache)
    assert score.faithfulness is None and score.faithfulness_spread is None
    assert score.skipped["faithfulness"] == "no claims" and score.judged == 1 and score.not_judged_reason is None


def test_no_cited_chunk_or_an_empty_answer_asks_nothing(judge, judge_cache):
    config = _config(judge)
    uncited = judge_case(QUESTION, ANSWER, {}, config=config, cache=judge_cache, ask_refusal=False)
    empty = judge_case(QUESTION, "  ", CHUNKS, config=config, cache=judge_cache, ask_refusal=False)
    assert (uncited.faithfulness, uncited.skipped["faithfulness"]) == (None, "no cited chunks")
    assert (empty.faithfulness, empty.skipped["faithfulness"], empty.asked) == (None, "empty answer", 0)
    assert judge.requests == []


def test_a_500_is_retried_then_the_success_is_used(judge, judge_cache):
    judge.play("faithfulness", "server_error", "faithfulness_valid")
    score = _faithfulness(judge, judge_cache)
    assert score.faithfulness == pytest.approx(2 / 3) and len(judge.requests) == 2


def test_retry_after_is_honoured_and_backoff_doubles_without_it(judge, judge_cache):
    judge.play("faithfulness", "rate_limited", "faithfulness_valid")
    waits: list[float] = []
    body = {"messages": [{"role": "user", "content": QUESTION}], "response_format": response_format("faithfulness")}
    with JudgeClient(_config(judge, backoff_s=0.25), judge_cache, sleep=waits.append) as client:
        content, reason = client.ask(body, 0, str)
    assert (content is not None, reason, waits) == (True, None, [2.0])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    waits.clear()
    with JudgeClient(JudgeConfig(url=closed, model="m", retries=3, backoff_s=0.25), judge_cache,
                     sleep=waits.append) as c:
        assert c.ask(body, 0, str)[0] is None and c.requests == 4
    assert waits == [0.25, 0.5, 1.0]


def test_a_server_failing_every_retry_is_not_judged_with_the_status(judge, judge_cache):
    judge.play("faithfulness", "server_error")
    score = _faithfulness(judge, judge_cache, retries=2)
    assert len(judge.requests) == 3 and score.faithfulness is None
    assert "HTTP 500" in score.not_judged_reason and "slot unavailable" in score.not_judged_reason
    assert score.not_judged_reason.endswith("(after 3 attempts)")


def test_an_unreachable_judge_and_a_hanging_one_are_not_judged(judge, judge_cache):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    down = judge_case(QUESTION, ANSWER, CHUNKS, config=JudgeConfig(
        url=f"http://127.0.0.1:{closed_port}/v1", model="m", retries=1, backoff_s=0.01), cache=judge_cache)
    assert down.judged == 0 and "cannot reach the judge" in down.not_judged_reason
    assert down.faithfulness is None and down.refused is None
    judge.play("faithfulness", "faithfulness_valid")
    judge.delay_s = 1.0
    slow = _faithfulness(judge, judge_cache, timeout_s=0.2, retries=0)
    assert slow.faithfulness is None and "no reply within 0.2 s" in slow.not_judged_reason


def test_a_zh_question_gets_the_zh_prompts(judge, judge_cache):
    judge.play("faithfulness", "faithfulness_zh")
    judge.play("refusal", "refusal_no")
    score = judge_case(ZH_QUESTION, ZH_ANSWER, ZH_CHUNKS, config=_config(judge), cache=judge_cache)
    assert score.faithfulness == pytest.approx(2 / 3) and score.refused is False
    systems = {r["task"]: r["body"]["messages"][0]["content"] for r in judge.requests}
    assert systems == {"faithfulness": FAITHFULNESS_SYSTEM_ZH, "refusal": REFUSAL_SYSTEM_ZH}
    assert judge.requests[0]["body"]["messages"][1]["content"].startswith("问题:\n" + ZH_QUESTION)


def test_the_language_is_the_cjk_share_of_the_question_tokens():
    assert question_language("RAGAS 的 faithfulness 指标怎么算？") == "zh"  # 6 CJK characters, 2 words
    assert question_language("What does 信息不足 mean in RGB?") == "en"  # 4 CJK characters, 5 words
    assert question_language("How tall is it?") == "en" and question_language("") == "en"


def test_repeats_report_mean_and_population_spread_and_are_cached_per_repeat(judge, judge_cache):
    judge.play("faithfulness", "faithfulness_valid", "faithfulness_fenced", "faithfulness_valid")
    score = _faithfulness(judge, judge_cache, repeats=3, concurrency=1)
    assert score.faithfulness_values == pytest.approx([2 / 3, 1 / 2, 2 / 3])
    assert score.faithfulness == pytest.approx(11 / 18, abs=1e-12)
    assert score.faithfulness_spread == pytest.approx(math.sqrt(1 / 162), abs=1e-12)
    assert (score.faithfulness_min, score.faithfulness_max) == pytest.approx((0.5, 2 / 3))
    assert (score.asked, score.judged, len(judge.requests), len(judge_cache)) == (3, 3, 3, 3)
    assert _faithfulness(judge, judge_cache, repeats=3) == score and len(judge.requests) == 3


def test_refusal_is_the_majority_of_the_votes_and_a_tie_is_none(judge, judge_cache):
    judge.play("refusal", "refusal_yes", "refusal_no", "refusal_yes")
    config = _config(judge, repeats=3)
    score = judge_case(QUESTION, "I don't have that information.", {}, config=config, cache=judge_cache)
    assert (score.refused, score.refused_votes) == (True, [True, False, True])
    assert score.skipped == {"faithfulness": "no cited chunks"}
    judge.play("refusal", "refusal_no", "refusal_yes")
    tie = judge_case(QUESTION, "Hard to say.", {}, config=_config(judge, repeats=2), cache=judge_cache)
    assert tie.refused is None and tie.skipped["refused"] == "refusal votes tied (1 of 2)"


def test_judge_cases_keeps_the_order_reports_progress_and_summarises(judge, judge_cache):
    judge.play("faithfulness", "faithfulness_valid")
    judge.play("refusal", "refusal_no")
    items = [JudgeItem(question=QUESTION, answer=ANSWER, cited_chunk_texts=CHUNKS),
             JudgeItem(question=QUESTION, answer="It is 330 m tall.", cited_chunk_texts={}),
             JudgeItem(question=ZH_QUESTION, answer=ZH_ANSWER, cited_chunk_texts={C1: CHUNKS[C1]},
                       ask_refusal=False)]
    seen = []
    scores = judge_cases(items, _config(judge, concurrency=2), lambda done, total: seen.append((done, total)),
                         cache=judge_cache)
    assert seen == [(1, 3), (2, 3), (3, 3)]
    assert [s.faithfulness for s in scores] == pytest.approx([2 / 3, None, 2 / 3], nan_ok=False)
    assert scores[1].skipped["faithfulness"] == "no cited chunks" and scores[2].refused is None
    summary = judge_summary([*scores, None])
    assert (summary.mean, summary.n_scored, summary.n_skipped) == (pytest.approx(2 / 3), 2, 2)
    assert summary.skip_reasons == {"no cited chunks": 1, "not sent to the judge": 1}


def test_docs_judge_md_holds_every_prompt_and_reply_schema_verbatim():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "judge.md").read_text(encoding="utf-8")
    missing = [f"{task}/{language}" for (task, language), text in SYSTEM_PROMPTS.items() if text not in doc]
    missing += [f"{task} schema" for task, schema in REPLY_SCHEMAS.items()
                if json.dumps(schema, ensure_ascii=False) not in doc]
    assert not missing, "docs/judge.md lacks the prompt text of: " + ", ".join(missing)


def test_a_url_that_is_not_http_is_a_clear_error(judge_cache):
    with pytest.raises(JudgeConfigError, match="judge url 'ftp://judge.local/v1' must be http"):
        judge_case(QUESTION, ANSWER, CHUNKS, config=JudgeConfig(url="ftp://judge.local/v1", model="m"),
                   cache=judge_cache)
    with pytest.raises(JudgeConfigError) as raised:
        judge_case(QUESTION, ANSWER, CHUNKS, config=JudgeConfig(url="ftp://bob:hunter2@judge.local", model="m"),
                   cache=judge_cache)
    assert "hunter2" not in str(raised.value) and "//***@judge.local" in str(raised.value)


def test_the_cache_file_defaults_under_the_project_and_follows_rag_judge_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("RAG_PROJECT_ROOT", str(tmp_path))
    monkeypatch.delenv("RAG_JUDGE_CACHE", raising=False)
    assert judge_cache_file() == tmp_path.resolve() / ".rag_pipeline" / "judge-cache.jsonl"
    monkeypatch.setenv("RAG_JUDGE_CACHE", str(tmp_path / "elsewhere.jsonl"))
    assert JudgeCache().path == (tmp_path / "elsewhere.jsonl").resolve()
