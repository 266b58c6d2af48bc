"""Import a BEIR-layout benchmark (``corpus.jsonl``, ``queries.jsonl``, ``qrels.tsv`` or ``qrels/<split>.tsv``).

The corpus becomes a knowledge base with one chunk per document (title + blank line + text), the qrels a dataset
(docs/design.md §2) with the real chunk ids. Nothing is dropped silently: documents without text, and queries left
without a relevant document, are listed with their reason in the dataset's ``metadata``; every check runs before
the ingestion. Qrels grades are integers 0–10; with more than one positive grade ``relevant_chunk_ids`` is
``{chunk_id: grade}``, otherwise the list of positive chunks."""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# A query that would break one of a dataset case's limits is skipped with the reason: the written dataset stays valid.
from rag_pipeline.contracts.dataset import (
    MAX_CASE_ID_CHARS,
    MAX_CASES,
    MAX_GRADE,
    MAX_K,
    MAX_QUESTION_CHARS,
    MAX_RELEVANT_IDS,
)
from rag_pipeline.knowledge_base import chunking, jsonl_lines
from rag_pipeline.knowledge_base.embedding import DEFAULT_MODEL
from rag_pipeline.knowledge_base.ingestion import IngestResult, Progress, ingest_documents
from rag_pipeline.knowledge_base.sources import SourceDocument, SourceError

_GRADE = re.compile(r"[0-9]+")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _jsonl(path: Path):
    """(line number, object) of every non-blank line."""
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                try:  # the parse of document lines: deep nesting and huge numbers are clear errors too
                    obj = jsonl_lines.parse_line(line)
                except jsonl_lines.LineError as exc:
                    raise SourceError(f"{path}:{lineno}: {exc}") from None
                if obj.get("_id") is None:
                    raise SourceError(f"{path}:{lineno}: each line needs an object with an '_id'")
                yield lineno, obj


def _text(value) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _qrels_path(folder: Path, split: str) -> Path:
    for path in (folder / "qrels" / f"{split}.tsv", folder / "qrels.tsv"):
        if path.exists():
            return path
    raise SourceError(f"{folder}: no qrels/{split}.tsv or qrels.tsv")


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Every judgement ``{query_id: {doc_id: grade}}`` of a qrels TSV, grade 0 included; a grade that is not an
    integer 0-10 is a :class:`SourceError` naming the file, line and value."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as fh:
        for lineno, row in enumerate(csv.reader(fh, delimiter="\t"), start=1):
            if not row or row[0] == "query-id" or not "".join(row).strip():
                continue
            if len(row) < 3:
                raise SourceError(f"{path}:{lineno}: expected query-id, corpus-id and score separated by tabs, "
                                  f"got {chr(9).join(row)!r}")
            qid, doc_id, score = row[0], row[1], row[2].strip()
            if not _GRADE.fullmatch(score) or int(score) > MAX_GRADE:
                raise SourceError(f"{path}:{lineno}: score {row[2]!r} (query {qid}, document {doc_id}) is not an "
                                  f"integer grade from 0 to {MAX_GRADE}")
            qrels.setdefault(qid, {})[doc_id] = int(score)
    return qrels


def read_beir(folder: str | Path, split: str = "test", max_docs: int | None = None, max_queries: int | None = None):
    """(documents, queries {id: text}, qrels {qid: {doc_id: grade}}) of a BEIR folder, optionally a subset.

    ``qrels`` holds every judged query of the split in case order (shorter ids first); a subset keeps the first
    ``max_queries`` judged queries with text and a positive judgement, their documents, and ``max_docs`` others."""
    folder = Path(folder)
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not (folder / name).exists():
            raise SourceError(f"{folder}: missing {name} (expected a BEIR-layout folder)")
    qrels = read_qrels(_qrels_path(folder, split))
    texts = {str(q["_id"]): _text(q.get("text")) for _, q in _jsonl(folder / "queries.jsonl") if str(q["_id"]) in qrels}
    qids = sorted(qrels, key=lambda q: (len(q), q))
    if max_queries:
        qids = [q for q in qids if texts.get(q, "").strip() and max(qrels[q].values()) > 0][:max_queries]
    qrels = {q: qrels[q] for q in qids}
    queries = {q: texts[q] for q in qids if q in texts}
    needed = {d for rel in qrels.values() for d in rel}
    docs, others, seen = [], 0, set()
    for lineno, obj in _jsonl(folder / "corpus.jsonl"):
        doc_id = str(obj["_id"])
        if doc_id in seen:
            raise SourceError(f"{folder / 'corpus.jsonl'}:{lineno}: duplicate document _id {doc_id!r}")
        seen.add(doc_id)
        if max_docs is not None and doc_id not in needed:
            if others >= max_docs:
                continue
            others += 1
        title, text = _text(obj.get("title")), _text(obj.get("text"))
        docs.append(SourceDocument(doc_id, title or None, f"{title}\n\n{text}" if title else text))
    return docs, queries, qrels


@dataclass
class BeirPlan:
    """What an import will ingest and write, decided before any database work (:func:`plan_import`)."""

    documents: list[SourceDocument]  # the documents to ingest (those with text)
    cases: list[dict]
    metadata: dict = field(default_factory=dict)

    def dataset(self, knowledge_base: str) -> dict:
        """The dataset file's content: ``{"knowledge_base", "metadata", "cases"}`` (no ``name``: the file's stem)."""
        return {"knowledge_base": knowledge_base, "metadata": self.metadata, "cases": self.cases}


def _document_problem(doc: SourceDocument) -> str | None:
    if not doc.text:
        return "empty title and text"
    if not chunking.whole_document(doc.text):
        return "title and text are whitespace only"
    return "text is not valid Unicode (an unpaired UTF-16 surrogate)" if _SURROGATE.search(doc.text) else None


def _question_problem(question: str | None, case_id: str) -> str | None:
    if question is None:
        return "not in queries.jsonl"
    if not question.strip():
        return "empty text"
    if len(question) > MAX_QUESTION_CHARS:
        return f"text is {len(question):,} characters; a dataset question is at most {MAX_QUESTION_CHARS:,}"
    if "\x00" in question:
        return "text contains a NUL character"
    if _SURROGATE.search(question):
        return "text is not valid Unicode (an unpaired UTF-16 surrogate)"
    if len(case_id) > MAX_CASE_ID_CHARS:
        return f"case id {case_id[:40]!r}... is longer than {MAX_CASE_ID_CHARS} characters"
    return None


def plan_import(folder: str | Path, knowledge_base: str, *, split: str = "test", k: int = 10,
                max_docs: int | None = None, max_queries: int | None = None) -> BeirPlan:
    """Read and check a BEIR folder and build its dataset; raises :class:`SourceError` before any ingestion."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise SourceError(f"k must be an integer between 1 and {MAX_K}, got {k!r}")
    folder = Path(folder)
    docs, queries, qrels = read_beir(folder, split, max_docs, max_queries)
    by_name = {d.original_name: d for d in docs}
    for qid, judged in qrels.items():  # a bad qrels file fails fast
        missing = sorted(set(judged) - by_name.keys())
        if missing:
            raise SourceError(f"{folder}: qrels of query {qid} name document {missing[0]}, which is not in the corpus")

    skipped_docs = {d.original_name: reason for d in docs if (reason := _document_problem(d))}
    graded = len({g for judged in qrels.values() for g in judged.values() if g > 0}) > 1
    cases, skipped_queries, dropped, zeros_omitted = [], [], [], []
    for qid, judged in qrels.items():
        dropped += [{"query": qid, "document": d, "grade": judged[d]} for d in sorted(judged) if d in skipped_docs]
        kept = {d: g for d, g in sorted(judged.items()) if d not in skipped_docs}
        case_id = f"{folder.name}-{qid}"
        reason = _question_problem(queries.get(qid), case_id)
        if reason is None and not any(g > 0 for g in judged.values()):
            reason = "only grade-0 judgements"
        if reason is None and not any(g > 0 for g in kept.values()):
            reason = "every relevant document was skipped (no text)"
        if reason is None and graded and len(kept) > MAX_RELEVANT_IDS:
            kept = {d: g for d, g in kept.items() if g > 0}  # grade 0 changes no metric
            zeros_omitted.append(qid)
        if reason is None and sum(g > 0 for g in kept.values()) > MAX_RELEVANT_IDS:
            reason = (f"{sum(g > 0 for g in kept.values())} relevant documents; a dataset case has at most "
                      f"{MAX_RELEVANT_IDS}")
        if reason is not None:
            skipped_queries.append({"query": qid, "reason": reason})
            continue
        ids = {d: str(chunking.chunk_id(knowledge_base, d, chunking.whole_document(by_name[d].text)[0])) for d in kept}
        relevant = {ids[d]: g for d, g in kept.items()} if graded else [ids[d] for d, g in kept.items() if g > 0]
        cases.append({"case_id": case_id, "question": queries[qid], "relevant_chunk_ids": relevant, "k": k})
    if not cases:
        reasons = sorted({s["reason"] for s in skipped_queries})
        raise SourceError(f"{folder}: none of the {len(qrels)} judged queries of split {split!r} can become a case "
                          f"({'; '.join(reasons) or 'no judgement'})")
    if len(cases) > MAX_CASES:
        raise SourceError(f"{folder}: {len(cases)} queries; a dataset holds at most {MAX_CASES} cases")
    metadata = {
        "source": "beir", "folder": str(folder), "split": split, "grades": "graded" if graded else "binary",
        "skipped_queries": skipped_queries,
        "skipped_documents": [{"document": d, "reason": r} for d, r in skipped_docs.items()],
        "dropped_labels": dropped,
        "zero_grades_omitted": zeros_omitted}
    return BeirPlan([d for d in docs if d.original_name not in skipped_docs], cases, metadata)


def import_beir(engine, folder: str | Path, knowledge_base: str, *, split: str = "test",
                models: Sequence[str] = (DEFAULT_MODEL,), text_search: str = "english", k: int = 10,
                max_docs: int | None = None, max_queries: int | None = None,
                progress: Progress | None = None) -> tuple[IngestResult, dict]:
    """Ingest the corpus (one chunk per document) and build the dataset dict ``{"knowledge_base", "metadata",
    "cases"}`` (see :func:`plan_import`; every check runs before the ingestion)."""
    plan = plan_import(folder, knowledge_base, split=split, k=k, max_docs=max_docs, max_queries=max_queries)
    result = ingest_plan(engine, plan, knowledge_base, models=models, text_search=text_search, progress=progress)
    return result, plan.dataset(knowledge_base)


def ingest_plan(engine, plan: BeirPlan, knowledge_base: str, *, models: Sequence[str] = (DEFAULT_MODEL,),
                text_search: str = "english", progress: Progress | None = None) -> IngestResult:
    """Ingest the documents of a plan, one chunk per document (the chunks its labels name)."""
    return ingest_documents(engine, plan.documents, knowledge_base, text_search=text_search, chunk_size=None,
                            chunk_overlap=0, models=models, progress=progress)
