"""The optional LLM judge: faithfulness of an answer to its cited chunks, and refusal by majority vote; an
unparsed reply or HTTP error is "not judged", never a 0 (docs/judge.md, docs/design.md §12)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed

from rag_pipeline.answers.judge.client import JudgeCache, JudgeClient, judge_identity
from rag_pipeline.answers.judge.prompts import (
    FaithfulnessReply,
    RefusalReply,
    Reply,
    Task,
    build_messages,
    parse_reply,
    question_language,
    response_format,
)
from rag_pipeline.contracts.answers import AnswerMetricSummary
from rag_pipeline.contracts.judge import JudgeClaim, JudgeConfig, JudgeItem, JudgeScore

Progress = Callable[[int, int], None]
"""Called with (answers judged, answers in all) after each answer."""


def judge_case(question: str, answer: str, cited_chunk_texts: Mapping[str, str], *, config: JudgeConfig,
               cache: JudgeCache | None = None, ask_faithfulness: bool = True,
               ask_refusal: bool = True) -> JudgeScore:
    """The judge's verdicts on one answer (``cache`` None: the ``RAG_JUDGE_CACHE`` file)."""
    item = JudgeItem(question=question, answer=answer, cited_chunk_texts=dict(cited_chunk_texts),
                     ask_faithfulness=ask_faithfulness, ask_refusal=ask_refusal)
    with JudgeClient(config, cache) as client:
        return _judge(client, item)


def judge_cases(items: Sequence[JudgeItem], config: JudgeConfig, progress: Progress | None = None, *,
                cache: JudgeCache | None = None) -> list[JudgeScore]:
    """The judge's verdicts on every item, in the items' order, ``config.concurrency`` requests at once."""
    if not items:
        return []
    with JudgeClient(config, cache) as client, ThreadPoolExecutor(max_workers=config.concurrency) as pool:
        futures = [pool.submit(_judge, client, item) for item in items]
        for done, future in enumerate(as_completed(futures), 1):
            future.result()
            if progress:
                progress(done, len(items))
        return [future.result() for future in futures]


def _ask(client: JudgeClient, task: Task, item: JudgeItem) -> tuple[list[Reply], list[str]]:
    """Every repeat's valid reply to ``task``, and the reasons of the repeats that gave none."""
    language = question_language(item.question)
    body = {"messages": build_messages(task, language, item.question, item.answer, item.cited_chunk_texts),
            "response_format": response_format(task)}
    replies, reasons = [], []
    for repeat in range(client.config.repeats):
        reply, reason = client.ask(body, repeat, lambda content: parse_reply(task, content, item.cited_chunk_texts))
        if reply is None:
            reasons.append(f"{task} repeat {repeat + 1}: {reason}")
        else:
            replies.append(reply)
    return replies, reasons


def _judge(client: JudgeClient, item: JudgeItem) -> JudgeScore:
    skipped: dict[str, str] = {}
    reasons: list[str] = []
    asked = judged = 0
    values: list[float] = []
    claims: list[JudgeClaim] = []
    if not item.ask_faithfulness:
        skipped["faithfulness"] = "not asked"
    elif not item.answer.strip():
        skipped["faithfulness"] = "empty answer"
    elif not item.cited_chunk_texts:
        skipped["faithfulness"] = "no cited chunks"
    else:
        replies, failed = _ask(client, "faithfulness", item)
        asked, judged = asked + client.config.repeats, judged + len(replies)
        reasons += failed
        claims = next((r.claims for r in replies if isinstance(r, FaithfulnessReply) and r.claims), [])
        values = [sum(c.supported for c in r.claims) / len(r.claims)
                  for r in replies if isinstance(r, FaithfulnessReply) and r.claims]
        if not values:
            skipped["faithfulness"] = "no claims" if replies else f"not judged: {failed[0]}"
    votes: list[bool] = []
    refused: bool | None = None
    if not item.ask_refusal:
        skipped["refused"] = "not asked"
    else:
        replies, failed = _ask(client, "refusal", item)
        asked, judged = asked + client.config.repeats, judged + len(replies)
        reasons += failed
        votes = [r.refused for r in replies if isinstance(r, RefusalReply)]
        yes = sum(votes)
        if not votes:
            skipped["refused"] = f"not judged: {failed[0]}"
        elif yes * 2 == len(votes):
            skipped["refused"] = f"refusal votes tied ({yes} of {len(votes)})"
        else:
            refused = yes * 2 > len(votes)
    return JudgeScore(
        faithfulness=statistics.fmean(values) if values else None,
        faithfulness_spread=statistics.pstdev(values) if len(values) >= 2 else None,
        faithfulness_min=min(values) if values else None, faithfulness_max=max(values) if values else None,
        faithfulness_values=values, claims=claims, refused=refused, refused_votes=votes, asked=asked, judged=judged,
        not_judged_reason=reasons[0] if reasons else None, skipped=skipped, judge=judge_identity(client.config))


def judge_summary(scores: Sequence[JudgeScore | None]) -> AnswerMetricSummary:
    """The mean faithfulness of the judged answers; the others counted by reason (None: not sent)."""
    values = [s.faithfulness for s in scores if s is not None and s.faithfulness is not None]
    reasons = Counter("not sent to the judge" if s is None
                      else s.skipped.get("faithfulness", "no value").split(":", 1)[0]
                      for s in scores if s is None or s.faithfulness is None)
    return AnswerMetricSummary(mean=statistics.fmean(values) if values else None, n_scored=len(values),
                               n_skipped=sum(reasons.values()), skip_reasons=dict(reasons))
