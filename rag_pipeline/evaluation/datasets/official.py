"""SQuAD v2.0 and CMRC 2018 dataset files read as datasets (docs/answers.md, "Official formats").

``{"version": ..., "data": [{"paragraphs": [{"context": ..., "qas": [{"id", "question", "answers": [{"text"}],
"is_impossible"?}]}]}]}``: one case per question, its answers' texts the reference answers (in order, repeats
dropped), ``answerable`` when it has an answer and is not ``is_impossible``. The files name no chunk, so a case
has no relevant chunk ids: such a dataset scores answers, not retrieval. The convention: ``squad`` for a v2.0 file
(or one with ``is_impossible``), ``cmrc`` when most questions are Chinese, else ``squad``."""

from __future__ import annotations

import unicodedata
from typing import Any

from rag_pipeline.contracts.dataset import (
    MAX_CASES,
    MAX_QUESTION_CHARS,
    MAX_REFERENCE_ANSWER_CHARS,
    MAX_REFERENCE_ANSWERS,
    identifier_problem,
    normal_identifier,
)
from rag_pipeline.evaluation.datasets.strict_json import DatasetProblem, show, type_name

OFFICIAL_K = 10
"""The ``k`` of a case read from an official file (the files have none; answers are scored without it)."""


def is_official(data: Any) -> bool:
    """Whether a decoded dataset document is in the SQuAD/CMRC layout (a ``data`` array, no ``cases``)."""
    return isinstance(data, dict) and "data" in data and "cases" not in data


def _text_problem(value: Any, limit: int) -> str | None:
    if not isinstance(value, str):
        return f"must be a string, got {type_name(value)}"
    if not value.strip():
        return "must not be empty"
    if len(value) > limit:
        return f"is {len(value):,} characters; the limit is {limit:,}"
    if "\x00" in value:
        return "contains a NUL character (\\u0000), which PostgreSQL cannot store"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains an unpaired UTF-16 surrogate (invalid Unicode)"
    return None


def _list(value: Any, where: str, problems: list[DatasetProblem]) -> list:
    if isinstance(value, list):
        return value
    problems.append(DatasetProblem(f"must be an array, got {type_name(value)}", field=where))
    return []


def _case(qa: Any, where: str, seen: dict[str, str], problems: list[DatasetProblem]) -> dict[str, Any] | None:
    if not isinstance(qa, dict):
        problems.append(DatasetProblem(f"must be an object (a question), got {type_name(qa)}", field=where))
        return None
    before = len(problems)
    raw_id, qid = qa.get("id"), None
    if (problem := _text_problem(raw_id, 200) or identifier_problem(str(raw_id))) is not None:
        problems.append(DatasetProblem(problem, field=f"{where}.id"))
    else:
        qid = normal_identifier(str(raw_id))
        if qid in seen:
            problems.append(DatasetProblem(f"question id {show(qid)} already used at {seen[qid]} (ids are unique)",
                                           field=f"{where}.id", case_id=qid))
        seen.setdefault(qid, where)
    if (problem := _text_problem(qa.get("question"), MAX_QUESTION_CHARS)) is not None:
        problems.append(DatasetProblem(problem, field=f"{where}.question", case_id=qid))
    references: list[str] = []
    answers = _list(qa.get("answers", []), f"{where}.answers", problems)
    for j, answer in enumerate(answers):
        text = answer.get("text") if isinstance(answer, dict) else answer
        if (problem := _text_problem(text, MAX_REFERENCE_ANSWER_CHARS)) is not None:
            problems.append(DatasetProblem(problem, field=f"{where}.answers[{j}].text", case_id=qid))
        elif isinstance(text, str) and text not in references:
            references.append(text)
    if len(references) > MAX_REFERENCE_ANSWERS:
        problems.append(DatasetProblem(f"has {len(references)} distinct answers; the limit is "
                                       f"{MAX_REFERENCE_ANSWERS}", field=f"{where}.answers", case_id=qid))
    impossible = qa.get("is_impossible", False)
    if not isinstance(impossible, bool):
        problems.append(DatasetProblem(f"must be true or false, got {type_name(impossible)}",
                                       field=f"{where}.is_impossible", case_id=qid))
    if len(problems) > before:
        return None
    return {"case_id": qid, "question": qa["question"], "relevant_chunk_ids": [], "k": OFFICIAL_K,
            "reference_answers": references, "answerable": bool(references) and not impossible}


def official_cases(data: dict, problems: list[DatasetProblem]) -> tuple[list[dict[str, Any]], str]:
    """The cases (as :meth:`EvaluationCase.from_dict` takes them) and the convention of a SQuAD v2.0 / CMRC 2018
    document; every problem is added to ``problems``, named by its place (``data[0].paragraphs[1].qas[2].id``)."""
    cases: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    impossible = False
    for i, article in enumerate(_list(data.get("data"), "data", problems)):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        for p, paragraph in enumerate(_list(paragraphs, f"data[{i}].paragraphs", problems)):
            qas = paragraph.get("qas") if isinstance(paragraph, dict) else None
            for q, qa in enumerate(_list(qas, f"data[{i}].paragraphs[{p}].qas", problems)):
                impossible = impossible or (isinstance(qa, dict) and "is_impossible" in qa)
                if (case := _case(qa, f"data[{i}].paragraphs[{p}].qas[{q}]", seen, problems)) is not None:
                    cases.append(case)
                if len(cases) > MAX_CASES:
                    problems.append(DatasetProblem(f"more than {MAX_CASES:,} questions", field="data"))
                    return cases, "squad"
    if not cases and not problems:
        problems.append(DatasetProblem("has no question (data[].paragraphs[].qas[])", field="data"))
    version = str(data.get("version", ""))
    squad = version.startswith("v2") or impossible or 2 * sum(_mostly_han(c["question"]) for c in cases) < len(cases)
    return cases, "squad" if squad else "cmrc"


def _mostly_han(text: str) -> bool:
    if text.isascii():  # no CJK character: not mostly Han (the common English question, decided without a scan)
        return False
    letters = [c for c in text if c.isalnum()]
    return bool(letters) and 2 * sum(unicodedata.name(c, "").startswith("CJK") for c in letters) >= len(letters)
