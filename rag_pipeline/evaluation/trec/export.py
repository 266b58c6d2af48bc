"""Export a stored run as a TREC run file, a dataset as qrels (graded) + topics (JSON Lines), each written whole
by the project's one file writer. Ids: a chunk with an original external id gets it back, any other its UUID."""

from __future__ import annotations

import json
import os

import sqlalchemy as sa

from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.contracts.trec import TrecExport
from rag_pipeline.evaluation.datasets.load import Dataset
from rag_pipeline.evaluation.queries import trec as queries
from rag_pipeline.evaluation.runs import lifecycle
from rag_pipeline.evaluation.trec.lines import run_line
from rag_pipeline.storage.files import atomic_output
from rag_pipeline.storage.names import printable


class TrecExportError(BadInputError, ValueError):
    """What a TREC file cannot hold (an id with whitespace), or a run that is not stored whole."""


def _token(value: str, what: str) -> str:
    if not value or any(ch.isspace() for ch in value):
        raise TrecExportError(f"{what} {printable(value)!r} holds whitespace: a TREC file separates its fields by "
                              "whitespace, so it cannot be written; nothing was written")
    return value


SCORES = ("stored", "rank")


def export_run(engine: sa.Engine, run_id, path: str | os.PathLike, tag: str | None = None,
               scores: str = "stored") -> TrecExport:
    """Write a succeeded run's whole candidate pools as ``qid Q0 docno rank score tag`` lines, by case (dataset
    order) and rank; ``tag`` defaults to the strategy version. ``scores``: ``stored`` (the final scores) or
    ``rank`` (``1/rank``: trec_eval reads back exactly the stored order). Counts the tied pairs trec_eval would
    re-order (equal score, docno not descending)."""
    if scores not in SCORES:
        raise TrecExportError(f"scores {scores!r}: expected one of {list(SCORES)}")
    lines = ties = 0
    with engine.connect() as conn:
        run = lifecycle.get_run(conn, run_id)
        if run.status != "succeeded":
            raise TrecExportError(f"run {run.id} is {run.status}: only a succeeded run has its whole pools stored")
        tag = _token(tag or run.strategy_version, "the tag")
        previous: tuple[str, float, bytes] | None = None
        with atomic_output(path) as out:
            for row in queries.run_lines(conn, run.id, run.knowledge_base_id):
                qid, docno = _token(row.case_id, "case id"), _token(row.docno, "document id")
                score = row.score if scores == "stored" else 1.0 / row.rank
                out.write(run_line(qid, docno, row.rank, score, tag))
                key = docno.encode("utf-8")
                ties += previous is not None and previous[:2] == (qid, score) and previous[2] < key
                previous = (qid, score, key)
                lines += 1
    return TrecExport(files={str(path): lines}, tied_scores=ties)


def export_dataset(engine: sa.Engine, dataset: Dataset, knowledge_base_id, qrels: str | os.PathLike,
                   topics: str | os.PathLike) -> TrecExport:
    """Write ``qid 0 docno grade`` per judgment (grade 0 kept; a list-form case's ids grade 1) and one JSON object
    per case (``qid``, ``question``, ``k``; ``graded``, ``answerable``, ``reference_answers``, ``key_points`` when
    set; ``graded``: a graded case whose grades are all 1, which qrels alone would read back as a list)."""
    cases = dataset.cases
    with engine.connect() as conn:
        originals = queries.external_ids(conn, knowledge_base_id, sorted({i for c in cases for i in c.grades}))
    qrels_lines = 0
    with atomic_output(qrels) as out:
        for case in cases:
            qid = _token(case.case_id, "case id")
            for chunk_id, grade in case.grades.items():
                out.write(f"{qid} 0 {_token(originals.get(chunk_id, chunk_id), 'document id')} {grade}\n")
                qrels_lines += 1
    with atomic_output(topics) as out:
        for case in cases:
            data = case.as_dict()
            del data["relevant_chunk_ids"], data["case_id"]
            topic = {"qid": case.case_id, "question": data.pop("question"), "k": data.pop("k")}
            if case.is_graded and all(g == 1 for g in case.grades.values()):
                topic["graded"] = True
            topic |= data
            out.write(json.dumps(topic, ensure_ascii=False) + "\n")
    return TrecExport(files={str(qrels): qrels_lines, str(topics): len(cases)})
