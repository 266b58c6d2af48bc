"""An official prediction file, ``{question id: answer text}`` (SQuAD v2.0 and CMRC 2018), read as an answers file
(docs/answers.md, "Official formats").

Each answer becomes an :class:`AnswerRecord` whose ``refused`` is ``False`` unless its text is empty after SQuAD
normalisation (then unset: the SQuAD convention counts it as the system's "no answer", as the official script
does); no refusal phrase is looked for in a prediction, since the scripts score its text. Every problem (an id
not in the dataset, an id given twice, an answer that is not a string) names the file, the line of its id and the
field, and nothing is kept."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence

from rag_pipeline.answers.answers_file import AnswersFile, AnswersFileError, AnswersProblem
from rag_pipeline.answers.metrics.text_metrics import squad_normalize
from rag_pipeline.contracts.answers import MAX_ANSWER_CHARS, AnswerRecord
from rag_pipeline.contracts.dataset import normal_identifier
from rag_pipeline.evaluation.datasets.strict_json import got, show

MAX_LOCATED = 200
"""Problems whose line is looked up (each a scan of the file); the error lists at most 50 anyway."""


def looks_like_predictions(data: object) -> bool:
    """Whether a whole-file JSON value is a prediction object: no key of it is a field of an answers line."""
    return isinstance(data, dict) and not any(key in AnswerRecord.model_fields for key in data)


def _key_lines(text: str, key: str) -> list[int]:
    """The 1-based lines where ``key`` is written as an object key (either JSON escaping); ``[]`` if not seen."""
    lines: list[int] = []
    for written in dict.fromkeys((json.dumps(key, ensure_ascii=False), json.dumps(key))):
        for match in re.finditer(re.escape(written) + r"\s*:", text):
            lines.append(text.count("\n", 0, match.start()) + 1)
    return sorted(set(lines))


def _answer_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return f"must be a string (the answer text; \"\" for no answer), {got(value)}"
    if len(value) > MAX_ANSWER_CHARS:
        return f"is {len(value):,} characters; the limit is {MAX_ANSWER_CHARS:,}"
    if "\x00" in value:
        return "contains a NUL character (\\u0000), which PostgreSQL cannot store"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains an unpaired UTF-16 surrogate (invalid Unicode)"
    return None


def parse_predictions(data: dict, text: str, raw: bytes, *, case_ids: Sequence[str], source: str) -> AnswersFile:
    """The records of a prediction object already decoded from ``text`` (``raw``: the file's bytes, hashed);
    :class:`AnswersFileError` lists every problem."""
    known = set(case_ids)
    problems: list[AnswersProblem] = []
    records: dict[str, AnswerRecord] = {}
    first: dict[str, str] = {}
    for key in getattr(data, "duplicate_keys", ()):
        lines = _key_lines(text, key)
        problems.append(AnswersProblem(
            f"question id {show(key)} has more than one answer" + (f" (lines {', '.join(map(str, lines))})"
                                                                   if len(lines) > 1 else "")
            + "; give one answer per question", lines[-1] if lines else None, "case_id", key))
    def line(key: str) -> int | None:  # looked up only for the first problems: one scan of the text each
        if len(problems) >= MAX_LOCATED:
            return None
        lines = _key_lines(text, key)
        return lines[0] if lines else None

    for key, value in data.items():
        case_id = normal_identifier(key)
        if case_id not in known:
            problems.append(AnswersProblem(f"{show(key)} is not a question id of the dataset ({len(known)} cases)",
                                           line(key), "case_id", key))
            continue
        if case_id in first:
            problems.append(AnswersProblem(f"{show(key)} is the same question id as {show(first[case_id])} "
                                           "(ids are compared stripped); give one answer per question",
                                           line(key), "case_id", key))
            continue
        first[case_id] = key
        if (problem := _answer_problem(value)) is not None:
            problems.append(AnswersProblem(problem, line(key), "answer", key))
            continue
        assert isinstance(value, str)
        records[case_id] = AnswerRecord(case_id=case_id, answer=value,
                                        refused=None if not squad_normalize(value) else False)
    if not problems and not records:
        problems.append(AnswersProblem("has no predictions; expected {\"question id\": \"answer\", ...}"))
    if problems:
        raise AnswersFileError(source, sorted(problems, key=lambda p: p.line or 0))
    return AnswersFile(records=records, answerer=None, sha256=hashlib.sha256(raw).hexdigest(),
                       missing=[c for c in case_ids if c not in records])


def predictions_json(predictions: dict[str, str]) -> str:
    """The official prediction file's text (UTF-8 JSON, ids in dataset order)."""
    return json.dumps(predictions, ensure_ascii=False, indent=2) + "\n"
