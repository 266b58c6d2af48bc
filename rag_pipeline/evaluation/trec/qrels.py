"""Import qrels (``qid iteration docno grade``) + topics (JSON Lines: ``qid``, ``question``, optional ``k``,
``answerable``, ``reference_answers``, ``key_points``) as a stored dataset version, validated by the one dataset
validator. A topic whose grades are all 1 becomes a list-form case (unless its topic says ``"graded": true``), any
other a graded one."""

from __future__ import annotations

import json
import os
from typing import Any

import sqlalchemy as sa

from rag_pipeline.contracts.dataset import MAX_GRADE, RELEVANT_GRADE
from rag_pipeline.evaluation.datasets.load import Dataset, validate_dataset
from rag_pipeline.evaluation.queries import trec as queries
from rag_pipeline.evaluation.runs import results
from rag_pipeline.evaluation.trec.lines import MAX_LINE, TrecFileError, chunk_uuid, read_qrels
from rag_pipeline.knowledge_base.lifecycle import KnowledgeBaseRef
from rag_pipeline.storage.files import open_regular, read_lines_bounded

TOPIC_FIELDS = ("qid", "question", "k", "graded", "answerable", "reference_answers", "key_points")


def _topics(path: str | os.PathLike, default_k: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The topics in file order and the line of each ``qid``."""
    topics: list[dict[str, Any]] = []
    lines: dict[str, int] = {}
    with open_regular(path) as handle:
        for lineno, _, raw in read_lines_bounded(handle, path, MAX_LINE * 16):
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise TrecFileError(path, lineno, None, f"not a JSON object: {exc}") from None
            if not isinstance(data, dict):
                raise TrecFileError(path, lineno, None, "not a JSON object")
            if extra := sorted(set(data) - set(TOPIC_FIELDS)):
                raise TrecFileError(path, lineno, extra[0], f"unknown field; known: {', '.join(TOPIC_FIELDS)}")
            for field in ("qid", "question"):
                if not isinstance(data.get(field), str):
                    raise TrecFileError(path, lineno, field, "missing, or not a string")
            if data["qid"] in lines:
                raise TrecFileError(path, lineno, "qid", f"topic {data['qid']} given twice (first at line "
                                    f"{lines[data['qid']]})")
            lines[data["qid"]] = lineno
            case = {"case_id": data["qid"], "question": data["question"], "k": data.get("k", default_k)}
            if not isinstance(data.get("graded", False), bool):
                raise TrecFileError(path, lineno, "graded", "must be true or false")
            case["graded"] = data.get("graded") is True
            case |= {f: data[f] for f in ("answerable", "reference_answers", "key_points") if f in data}
            topics.append(case)
    return topics, lines


def read_dataset(qrels: str | os.PathLike, topics: str | os.PathLike, *, name: str, kb: KnowledgeBaseRef,
                 default_k: int = 10) -> tuple[Dataset, list[tuple[str, str]]]:
    """The dataset the two files make, and the ``(chunk UUID, original id)`` pairs of its derived ids."""
    cases, lines = _topics(topics, default_k)
    judged: dict[str, dict[str, int]] = {}
    first: dict[tuple[str, str], int] = {}
    derived: dict[str, str] = {}
    for row in read_qrels(qrels, MAX_GRADE):
        if row.qid not in lines:
            raise TrecFileError(qrels, row.line, "qid", f"topic {row.qid} is not in the topics file {topics}")
        if (row.qid, row.docno) in first:
            raise TrecFileError(qrels, row.line, "docno", f"topic {row.qid} judges document {row.docno} twice "
                                f"(first at line {first[(row.qid, row.docno)]})")
        first[(row.qid, row.docno)] = row.line
        chunk, is_derived = chunk_uuid(kb.name, row.docno)
        if is_derived:
            derived[str(chunk)] = row.docno
        judged.setdefault(row.qid, {})[str(chunk)] = row.grade
    for case in cases:
        grades = judged.get(case["case_id"], {})
        if case.get("answerable", True) and not any(g >= RELEVANT_GRADE for g in grades.values()):
            raise TrecFileError(topics, lines[case["case_id"]], "qid", f"topic {case['case_id']} has no relevant "
                                f"document (grade >= {RELEVANT_GRADE}) in {qrels}; mark it \"answerable\": false "
                                "if none is")
        as_list = not case.pop("graded") and all(g == RELEVANT_GRADE for g in grades.values())
        case["relevant_chunk_ids"] = list(grades) if as_list else grades
    dataset = validate_dataset({"knowledge_base": kb.name, "name": name, "cases": cases}, source=str(topics),
                               knowledge_base=kb.name, name=name)
    return dataset, sorted(derived.items())


def import_dataset(engine: sa.Engine, qrels: str | os.PathLike, topics: str | os.PathLike, *, name: str,
                   kb: KnowledgeBaseRef, default_k: int = 10) -> tuple[Dataset, str]:
    """Store the dataset of :func:`read_dataset` (one transaction) and the original ids; returns it and its id."""
    dataset, derived = read_dataset(qrels, topics, name=name, kb=kb, default_k=default_k)
    with engine.begin() as conn:
        dataset_id = results.store_dataset(conn, dataset, kb.name)
        queries.remember_ids(conn, kb.id, derived)
    return dataset, str(dataset_id)
