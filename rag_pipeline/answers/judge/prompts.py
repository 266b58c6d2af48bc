"""The judge's zh / en prompts and reply shapes; :data:`PROMPT_VERSION` hashes them (docs/judge.md)."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterator, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from rag_pipeline.contracts.judge import JudgeClaim

Language = Literal["en", "zh"]
Task = Literal["faithfulness", "refusal"]

ZH_TOKEN_SHARE = 0.5
MAX_CHUNK_CHARS = 6000
"""A cited chunk's text is cut at this many characters in the prompt (the cut is marked)."""

_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f]")
_WORD = re.compile("[^\\W\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f]+")


class FaithfulnessReply(BaseModel):
    """The faithfulness reply: every claim of the answer; ``[]`` for an answer without a factual claim."""

    model_config = ConfigDict(extra="ignore")

    claims: list[JudgeClaim]


class RefusalReply(BaseModel):
    """The refusal reply."""

    model_config = ConfigDict(extra="ignore")

    refused: bool


Reply = FaithfulnessReply | RefusalReply
REPLY_MODELS: dict[str, type[Reply]] = {"faithfulness": FaithfulnessReply, "refusal": RefusalReply}
_CLAIM_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["claim", "supported", "chunk_id"],
                 "properties": {"claim": {"type": "string"}, "supported": {"type": "boolean"},
                                "chunk_id": {"type": ["string", "null"]}}}
REPLY_SCHEMAS: dict[str, dict[str, object]] = {
    "faithfulness": {"type": "object", "additionalProperties": False, "required": ["claims"],
                     "properties": {"claims": {"type": "array", "items": _CLAIM_SCHEMA}}},
    "refusal": {"type": "object", "additionalProperties": False, "required": ["refused"],
                "properties": {"refused": {"type": "boolean"}}},
}
"""The JSON Schemas sent as ``response_format`` (strict: every property required, none added)."""

FAITHFULNESS_SYSTEM_EN = (
    "You check whether an answer is supported by the passages it cites. Split the answer into its atomic factual "
    "claims: short statements that can each be true or false. A refusal, a greeting, or a statement that the "
    "information is missing is not a claim. For each claim decide whether one cited passage states or directly "
    "implies it; use nothing but the passages, not your own knowledge. Reply with one JSON object and nothing "
    'else: {"claims": [{"claim": "<the claim>", "supported": true or false, "chunk_id": "<the id of the '
    'supporting passage, or null>"}]}. An answer without factual claims gets {"claims": []}.')
FAITHFULNESS_SYSTEM_ZH = (
    "你负责检查一个回答是否得到它所引用的段落的支持。把回答拆分成原子事实陈述：每条是一个可以判断真假的简短陈述。"
    "拒答、寒暄或“信息不足”之类的说法不算陈述。对每条陈述判断是否有某个被引用的段落明确说出或直接蕴含它；"
    "只依据这些段落，不要使用你自己的知识。只回复一个 JSON 对象，不要有其他内容："
    '{"claims": [{"claim": "<陈述>", "supported": true 或 false, "chunk_id": "<支持它的段落的 id，或 null>"}]}。'
    '没有事实陈述的回答回复 {"claims": []}。')
REFUSAL_SYSTEM_EN = (
    "You decide whether an answer declines to answer its question: it says it does not know, that the "
    "information is insufficient or not available, or it asks for another question, instead of answering. An "
    "answer that gives any answer to the question, even a partial or wrong one, is not a refusal. Reply with one "
    'JSON object and nothing else: {"refused": true} or {"refused": false}.')
REFUSAL_SYSTEM_ZH = (
    "你负责判断一个回答是否拒绝回答问题：它说不知道、信息不足或没有相关信息，或者请对方换个问题，而没有给出回答。"
    "只要回答对问题给出了任何答案（即使不完整或错误），就不算拒答。只回复一个 JSON 对象，不要有其他内容："
    '{"refused": true} 或 {"refused": false}。')
SYSTEM_PROMPTS: dict[tuple[str, str], str] = {
    ("faithfulness", "en"): FAITHFULNESS_SYSTEM_EN, ("faithfulness", "zh"): FAITHFULNESS_SYSTEM_ZH,
    ("refusal", "en"): REFUSAL_SYSTEM_EN, ("refusal", "zh"): REFUSAL_SYSTEM_ZH,
}
LABELS: dict[str, dict[str, str]] = {
    "en": {"question": "Question", "answer": "Answer", "passages": "Cited passages", "passage": "Passage",
           "cut": "[cut]"},
    "zh": {"question": "问题", "answer": "回答", "passages": "被引用的段落", "passage": "段落", "cut": "[已截断]"},
}


def question_language(question: str) -> Language:
    """``zh`` when CJK characters are at least :data:`ZH_TOKEN_SHARE` of the question's tokens, else ``en``."""
    cjk = len(_CJK.findall(question))
    words = len(_WORD.findall(question))
    return "zh" if cjk and cjk / (cjk + words) >= ZH_TOKEN_SHARE else "en"


def _passages(chunks: Mapping[str, str], language: Language) -> str:
    label = LABELS[language]
    parts = []
    for chunk_id, text in chunks.items():
        body = text if len(text) <= MAX_CHUNK_CHARS else text[:MAX_CHUNK_CHARS] + " " + label["cut"]
        parts.append(f"[{label['passage']} chunk_id={chunk_id}]\n{body}")
    return "\n\n".join(parts)


def build_messages(task: Task, language: Language, question: str, answer: str,
                   chunks: Mapping[str, str]) -> list[dict[str, str]]:
    """The chat messages of one task: the system prompt, then the question, the answer (and the cited passages)."""
    label = LABELS[language]
    user = f"{label['question']}:\n{question}\n\n{label['answer']}:\n{answer}"
    if task == "faithfulness":
        user += f"\n\n{label['passages']}:\n{_passages(chunks, language)}"
    return [{"role": "system", "content": SYSTEM_PROMPTS[(task, language)]}, {"role": "user", "content": user}]


def response_format(task: Task) -> dict[str, object]:
    """The ``response_format`` of the request (a server that ignores it is parsed leniently: :func:`parse_reply`)."""
    return {"type": "json_schema", "json_schema": {"name": f"{task}_reply", "strict": True,
                                                   "schema": REPLY_SCHEMAS[task]}}


class ReplyError(ValueError):
    """A judge reply that holds no JSON object of the asked shape; the message says what is wrong."""


MAX_CANDIDATES = 200
"""At most this many ``{`` of a reply are tried as the start of its JSON object."""


def _objects(content: str) -> Iterator[object]:
    """The whole content as JSON, then each object at one of its first :data:`MAX_CANDIDATES` ``{``."""
    decoder = json.JSONDecoder()
    starts = itertools.islice((m.start() for m in re.finditer(r"\{", content)), MAX_CANDIDATES)
    for start in itertools.chain([None], starts):
        try:
            yield json.loads(content) if start is None else decoder.raw_decode(content, start)[0]
        except json.JSONDecodeError:
            continue
        except RecursionError:
            raise ReplyError("the reply's JSON is nested too deeply to read") from None
        except ValueError:
            raise ReplyError("the reply's JSON holds an integer too long to read") from None


def _validated(task: Task, data: object) -> Reply:
    try:
        return REPLY_MODELS[task].model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "reply"
        raise ReplyError(f"reply does not match the {task} schema: {where}: {first['msg']}") from None


def parse_reply(task: Task, content: str, cited_ids: Mapping[str, str] | None = None) -> Reply:
    """The reply of ``task``: the content's first JSON object of the task's shape; claims cite cited chunks."""
    reply, first_error = None, None
    for data in _objects(content):
        try:
            reply = _validated(task, data)
            break
        except ReplyError as exc:
            first_error = first_error or exc
    if reply is None:
        raise first_error or ReplyError(f"no JSON object in the reply: {content[:200]!r}")
    if isinstance(reply, FaithfulnessReply) and cited_ids is not None:
        for n, claim in enumerate(reply.claims, 1):
            if claim.chunk_id is not None and claim.chunk_id not in cited_ids:
                raise ReplyError(f"claim {n} names chunk {claim.chunk_id!r}, which the answer does not cite")
    return reply


def _version() -> str:
    material = json.dumps({"system": {f"{t}/{lang}": v for (t, lang), v in SYSTEM_PROMPTS.items()},
                           "labels": LABELS, "schemas": REPLY_SCHEMAS,
                           "max_chunk_chars": MAX_CHUNK_CHARS}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(material.encode("utf-8")).hexdigest()[:12]


PROMPT_VERSION = _version()
"""sha256 prefix of the prompts, labels, reply schemas and the chunk cut: part of the judge's identity."""
